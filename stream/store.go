// Package stream is foldstream's durable stream store: one SQLite file (modernc.org/sqlite, WAL)
// holding many streams by path. It serves two views of the same data:
//
//   - the event view (Append, Read, subscriptions, claims) that processor engines run against, and
//   - the Durable Streams protocol view (records, content types, closure, forks, TTL, idempotent
//     producers) that package server exposes over HTTP.
//
// # Concurrency
//
// Every write goes through one writer goroutine (see writer.go). Callers hand it a function; the
// writer collects whatever functions are queued, runs each inside its own SAVEPOINT of one
// transaction, and commits once (group commit): one fsync covers every caller in the group, and a
// function that fails rolls back to its savepoint without failing its neighbours. The writer is the
// only goroutine that assigns offsets, so offsets of one stream are strictly increasing without a
// lock per stream. Readers use separate read-only connections and see committed snapshots.
//
// # Durability
//
// By default the file uses journal_mode=WAL and synchronous=FULL: an acknowledged write survives a
// process crash and a power loss. [Options.Synchronous] may relax this to NORMAL (survives a crash
// of the process, may lose the last transactions on power loss); it is never the default.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// Synchronous is SQLite's synchronous setting for the store's file.
type Synchronous string

const (
	// SyncFull makes every commit durable against power loss (the default).
	SyncFull Synchronous = "FULL"
	// SyncNormal keeps commits durable against a process crash only; in WAL mode the last
	// transactions may be lost on power loss. Faster; never the default.
	SyncNormal Synchronous = "NORMAL"
)

// Options configures a Store. The zero value is valid.
type Options struct {
	// Synchronous is the durability level. Defaults to SyncFull.
	Synchronous Synchronous
	// Clock is the time source for createdAt stamps, TTLs, claims and alarms. Defaults to
	// foldstream.SystemClock.
	Clock foldstream.Clock
	// Logger receives the store's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// ReadConns is the number of read connections. Defaults to 4.
	ReadConns int
	// MaxGroup caps how many queued writes share one transaction. Defaults to 256.
	MaxGroup int
	// ProducerReorderWait is how long a protocol append whose producer seq is ahead of the next
	// expected one waits for the earlier seqs (pipelined requests overtaking each other) before
	// it is refused with a sequence gap. Defaults to DefaultProducerReorderWait; negative
	// disables the wait.
	ProducerReorderWait time.Duration
}

// Store is an open stream store. It is safe for concurrent use.
type Store struct {
	path       string
	opts       Options
	clock      foldstream.Clock
	log        *slog.Logger
	drv        driver.Driver
	exclusive  bool // drv.Exclusive(): the writer's stream cache is authoritative
	writes     chan *writeReq
	stopListen func()

	// intakeMu orders enqueue (read lock) against Close stopping intake (write lock); see
	// writer.go. intakeStopped is closed once intake has stopped.
	intakeMu      sync.RWMutex
	intakeStopped chan struct{}

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	writerWG  sync.WaitGroup
	bgWG      sync.WaitGroup // background goroutines other than the writer
	stop      chan struct{}  // closed by Close to stop background loops

	// ws is the writer-owned state (writer.go); only the writer goroutine touches it.
	ws writerState

	notifyMu sync.Mutex
	notify   map[int64]chan struct{} // closed and replaced on every commit touching the stream

	ev      *eventView   // the event view's in-memory state (events.go)
	commits atomic.Int64 // group commits; benchmarks report events per commit

	// feeds order publishing on a shared database (feed.go).
	feeds feedSet

	protoOnce sync.Once
	protoSt   *protoState // the protocol view's in-memory state (protocol.go)

	created createdListeners // OnStreamCreated's listeners (list.go)

	changes commitWatchers               // WatchChanges' functions (subscriptions.go)
	subKick atomic.Pointer[func(string)] // WatchSubscriptions' function (subscriptions.go)

	lock *os.File // the exclusive lock on the database file, held until Close (lock.go)
}

// Open opens (creating if needed) the store in the SQLite file at path, migrating a file written
// by an earlier schema (see docs/store.md#schema-and-migrations). The path ":memory:" opens a
// private in-memory store, for tests.
//
// The store holds an exclusive lock on the file until Close (the sidecar file "<path>-lock"): a
// second Open of the same file, from another process or this one, fails with
// [foldstream.CodeStoreLocked], naming the file and, when known, the holder's pid. That lock is
// what makes the SQLite driver exclusive (see [driver.Driver.Exclusive]). A file or directory the
// store cannot write fails with [foldstream.CodeStoreReadOnly].
//
// A postgres:// URL opens the store on a PostgreSQL database instead (docs/postgres.md): any
// number of processes given the same URL share it.
func Open(path string, opts Options) (_ *Store, err error) {
	if pgdriver.IsURL(path) {
		return openPostgres(path, opts)
	}
	if opts.Synchronous == "" {
		opts.Synchronous = SyncFull
	}
	if opts.Synchronous != SyncFull && opts.Synchronous != SyncNormal {
		return nil, fmt.Errorf("open stream store: unknown synchronous mode %q (use FULL or NORMAL)", opts.Synchronous)
	}
	// The exclusive lock comes first, so a second opener never touches the database (lock.go).
	var lock *os.File
	defer func() {
		if err != nil {
			unlockStore(lock) //nolint:errcheck // Open failed; report that error
			err = openFailure(path, err)
		}
	}()
	if path != ":memory:" {
		if lock, err = lockStore(path); err != nil {
			return nil, err
		}
		// Prove the store can write, so a read-only file or directory is refused here and not
		// by every write later (storage.go); the driver's probe checks the database itself.
		if err := probeDirWritable(path); err != nil {
			return nil, err
		}
	}
	d, err := sqlitedriver.Open(sqlitedriver.Config{Path: path, Synchronous: string(opts.Synchronous), ReadConns: opts.ReadConns})
	if err != nil {
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	if err := d.ProbeWritable(context.Background()); err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store %s: prove the database takes writes: %w", path, err)
	}
	s, err := OpenDriver(context.Background(), d, opts)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	s.path, s.lock = path, lock
	return s, nil
}

// OpenDriver opens a store over a driver: it migrates the driver's schema, starts the writer and
// subscribes to the driver's notifications. Close closes the driver.
func OpenDriver(ctx context.Context, d driver.Driver, opts Options) (*Store, error) {
	if opts.Clock == nil {
		opts.Clock = foldstream.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = 256
	}
	if opts.ProducerReorderWait == 0 {
		opts.ProducerReorderWait = DefaultProducerReorderWait
	}
	if err := d.Migrate(ctx); err != nil {
		return nil, err
	}
	w, err := d.Writer(ctx)
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts:      opts,
		clock:     opts.Clock,
		log:       opts.Logger,
		drv:       d,
		exclusive: d.Exclusive(),
		writes:    make(chan *writeReq, 1024),
		stop:      make(chan struct{}),
		ws:        writerState{streams: make(map[string]*streamMem), woken: make(map[int64]bool)},
		notify:    make(map[int64]chan struct{}),
		ev:        newEventView(),

		intakeStopped: make(chan struct{}),
	}
	stop, err := d.Listen(ctx, s.remoteChange)
	if err != nil {
		return nil, err
	}
	s.stopListen = stop
	s.writerWG.Add(1)
	go s.runWriter(w)
	return s, nil
}

// remoteChange wakes the readers of a stream another process changed (StreamID 0: every stream).
func (s *Store) remoteChange(n driver.Notification) {
	if n.StreamID != 0 {
		s.remoteEphemerals(n)
		s.kickFeed(n.Path)
		s.wake(n.StreamID)
		s.changes.notify(n.Path)
		return
	}
	s.changes.notify("")
	s.kickAllFeeds()
	s.notifyMu.Lock()
	ids := make([]int64, 0, len(s.notify))
	for id := range s.notify {
		ids = append(ids, id)
	}
	s.notifyMu.Unlock()
	for _, id := range ids {
		s.wake(id)
	}
}

// Closed reports whether Close was called.
func (s *Store) Closed() bool { return s.closed.Load() }

// Driver returns the store's driver.
func (s *Store) Driver() driver.Driver { return s.drv }

// Path returns the file path the store was opened with.
func (s *Store) Path() string { return s.path }

// Clock returns the store's clock.
func (s *Store) Clock() foldstream.Clock { return s.clock }

// Close stops intake, lets every queued write finish, stops background loops and closes the
// database. It returns the first error met. Calling it again returns the same result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// Stop intake: once the write lock is held, no enqueue is between its check and its send.
		s.intakeMu.Lock()
		s.closed.Store(true)
		s.intakeMu.Unlock()
		close(s.stop)
		s.closeEventView()
		s.bgWG.Wait()
		close(s.intakeStopped) // the writer runs what is queued, then returns
		s.writerWG.Wait()
		s.stopListen()
		s.closeErr = errors.Join(s.drv.Close(), unlockStore(s.lock))
	})
	return s.closeErr
}

// ErrStoreClosed is returned by every operation on a closed store.
var ErrStoreClosed = &foldstream.Error{Code: foldstream.CodeClosed, Message: "stream store is closed"}

// readTx runs fn in a read-only transaction: a consistent snapshot of committed data.
func (s *Store) readTx(ctx context.Context, fn func(q driver.Reader) error) error {
	if s.closed.Load() {
		return ErrStoreClosed
	}
	return s.drv.Read(ctx, fn)
}

// changed returns a channel that is closed at the next commit touching the stream with this id.
// Take the channel before checking the condition you wait for, then wait on it, to never miss a
// commit.
func (s *Store) changed(streamID int64) <-chan struct{} {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	ch, ok := s.notify[streamID]
	if !ok {
		ch = make(chan struct{})
		s.notify[streamID] = ch
	}
	return ch
}

// wake closes the stream's change channel (called by the writer after a commit).
func (s *Store) wake(streamID int64) {
	s.notifyMu.Lock()
	ch, ok := s.notify[streamID]
	if ok {
		delete(s.notify, streamID)
	}
	s.notifyMu.Unlock()
	if ok {
		close(ch)
	}
}

// normalizePathForErrors trims a path for messages.
func quotePath(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }
