// Package kernel is the stream store's kernel (docs/store.md#the-kernel-and-its-layers): the
// writer and its group commit, the write transaction, the writer's caches (each stream's row, tail
// and producers; the tail cache of live reads), the one insert path, reads of records over a
// stream's fork segments, the per-stream wakes and the notifications between processes sharing a
// database. It names no feature: the layers of package stream (the event face, the protocol face,
// pausing, huge records, the subscription store) call down into it and register what they need it
// to run for them (hooks.go, hold.go) when a store opens.
package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Config configures the kernel. Package stream fills every field (its Config's defaults) before
// Open.
type Config struct {
	Clock              foldtype.Clock // the time source of commits and stamps
	Logger             *slog.Logger   // receives the kernel's logs
	MaxGroup           int            // queued writes per transaction
	MaxCommitsInFlight int            // groups' COMMITs on their way at once (shared databases)
	CommitStallAfter   time.Duration  // how long a COMMIT may take before commits count as stalled
	MaxCachedStreams   int            // streams the writer keeps in memory
	// DecodeEvent reads a stored message as an event, for the idempotency check of the insert
	// path (record.go); the event codec is the faces'.
	DecodeEvent func(path string, m Message) (foldtype.Event, error)
}

// Store is the kernel of an open stream store. Its methods are safe for concurrent use, but those
// documented as writer only, which only write functions and the hooks the writer runs may call.
type Store struct {
	// hooks are what the features layered on the kernel registered at open (hooks.go).
	hooks kernelHooks

	path      string
	opts      Config
	clock     foldtype.Clock
	log       *slog.Logger
	drv       driver.Driver
	caps      driver.Capabilities // driver.CapabilitiesOf(drv)
	health    commitHealth
	exclusive bool // drv.Exclusive(): the writer's stream cache is authoritative
	// remote collects the streams other processes committed to, for the writer (remotewrites.go).
	remote remoteWrites
	// heldBack, when set (by this package's tests only), is told the path of every write held
	// back because its stream is in a group whose commit is on its way (errInflight).
	heldBack   func(path string)
	writes     chan *writeReq
	stopListen func()
	// answers counts the writer's rounds of answers (writer.go): a write notes the count when it
	// is queued, so the writer can tell the callers it answered last that have queued again.
	answers atomic.Uint64

	// intakeMu orders enqueue (read lock) against Close stopping intake (write lock); see
	// writer.go. intakeStopped is closed once intake has stopped.
	intakeMu      sync.RWMutex
	intakeStopped chan struct{}

	closed    atomic.Bool
	closeOnce sync.Once
	closeDone chan struct{} // closed once Close has closed the database; closeErr is set then
	closeErr  error
	writerWG  sync.WaitGroup
	bgWG      sync.WaitGroup // background goroutines other than the writer
	// reads counts the read transactions in flight (Read); Close waits for them before it
	// closes the database, since database/sql's Close does not wait for a connection being
	// opened or used, and such a connection keeps (or creates) the database's files after Close.
	reads     atomic.Int64
	readsMu   sync.Mutex
	readsDone *sync.Cond    // signalled, under readsMu, when the last read after close ends
	stop      chan struct{} // closed by Close to stop background loops

	rowExts int // row extensions registered (NewRowExt)
	// ws is the writer-owned state (writer.go); only the writer goroutine touches it.
	ws writerState

	notifyMu sync.Mutex
	notify   map[int64]chan struct{} // closed and replaced on every commit touching the stream
	tails    tailCache               // live reads' cached tails (tailcache.go)
	// cachedReads counts live reads answered from the tail cache.
	cachedReads atomic.Int64

	commits   atomic.Int64 // group commits; benchmarks report events per commit
	observers commitObservers

	changes commitWatchers // every commit's changed streams (Changes)
	landed  commitWatchers // commits that land events (Landed)
}

// Open opens the kernel over a driver: it migrates the driver's schema, calls use (which
// registers the layers' hooks, before anything runs), starts the writer and subscribes to the
// driver's notifications. opts must be complete (package stream fills its defaults). When Open
// fails, the caller still owns d.
func Open(ctx context.Context, d driver.Driver, opts Config, use func(*Store)) (*Store, error) {
	caps := driver.CapabilitiesOf(d)
	if err := d.Migrate(ctx); err != nil {
		if c := caps.ErrorClassifier; c != nil {
			err = c.ClassifyError(err)
		}
		return nil, err
	}
	w, err := d.Writer(ctx)
	if err != nil {
		return nil, err
	}
	s := &Store{
		path:      location(caps),
		opts:      opts,
		clock:     opts.Clock,
		log:       opts.Logger,
		drv:       d,
		caps:      caps,
		exclusive: d.Exclusive(),
		writes:    make(chan *writeReq, 1024),
		stop:      make(chan struct{}),
		ws:        writerState{},
		notify:    make(map[int64]chan struct{}),

		intakeStopped: make(chan struct{}),
		closeDone:     make(chan struct{}),
	}
	s.readsDone = sync.NewCond(&s.readsMu)
	use(s)
	s.ws.streams = newStreamCache(opts.MaxCachedStreams, func(path string) bool { return s.ws.held[path] != nil })
	// The listener lives until Close, not until ctx ends: ctx bounds the opening only.
	stop, err := d.Listen(context.WithoutCancel(ctx), s.remoteChange)
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
		s.remote.note(n.StreamID, n.Path)
		for _, remote := range s.hooks.remote {
			remote(n)
		}
		row, recs := s.remoteTail(n)
		s.wakeWith(n.StreamID, row, recs)
		if n.Path != "" {
			s.landed.Notify(n.Path)
		}
		s.changes.Notify(n.Path)
		return
	}
	s.landed.Notify("")
	s.changes.Notify("")
	for _, remote := range s.hooks.remote {
		remote(n)
	}
	s.notifyMu.Lock()
	s.dropAllTails()
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

// Driver returns the store's driver; driver.CapabilitiesOf tells what more it offers.
func (s *Store) Driver() driver.Driver { return s.drv }

// location names the database for logs (see [driver.Locator]), or "" when its driver cannot say.
func location(caps driver.Capabilities) string {
	if l := caps.Locator; l != nil {
		return l.Location()
	}
	return ""
}

// Path names the store's database for logs and messages: the file path of a SQLite store, the
// URL (password removed) of a PostgreSQL one; "" when its driver does not say.
func (s *Store) Path() string { return s.path }

// Clock returns the store's clock.
func (s *Store) Clock() foldtype.Clock { return s.clock }

// Close closes the store. At once, before it waits for anything: intake stops (every later call
// fails with code CLOSED, see [ErrStoreClosed]), no subscription starts, and the alarm loop stops
// taking alarms. Then it drains: running alarm handlers get their context cancelled and are waited
// for, subscription deliveries in progress finish, every write queued before intake stopped runs
// and commits, read transactions in flight end, and the database is closed (no file of it stays
// open). It returns the driver's close error, or ctx's error when ctx ends first. Calling it
// again waits again, with its own ctx, for the same result.
//
// Close takes a context because it waits: for the writer's queue (each write as long as the
// database takes, a network round trip away on PostgreSQL) and for deliveries into engines (a
// batch with blocking work runs to its end). When ctx ends first the drain goes on in the
// background and the database closes when it is done; nothing acknowledged is lost and nothing
// new is accepted. A program that exits at that point loses no acknowledged write either: every
// acknowledged write was committed (durable by the driver's setting) before it was acknowledged.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// Stop intake: once the write lock is held, no enqueue is between its check and its send.
		s.intakeMu.Lock()
		s.closed.Store(true)
		s.intakeMu.Unlock()
		close(s.stop)
		for _, c := range s.hooks.closing {
			if c.stop != nil {
				c.stop()
			}
		}
		go func() {
			for _, c := range s.hooks.closing {
				if c.drain != nil {
					c.drain()
				}
			}
			s.bgWG.Wait()
			close(s.intakeStopped) // the writer runs what is queued, then returns
			s.writerWG.Wait()
			s.stopListen()
			s.waitReads()
			s.closeErr = s.drv.Close()
			close(s.closeDone)
		}()
	})
	select {
	case <-s.closeDone:
		return s.closeErr
	default:
	}
	select {
	case <-s.closeDone:
		return s.closeErr
	case <-ctx.Done():
		return fmt.Errorf("stream: close: still draining: %w", ctx.Err())
	}
}

// Exclusive reports whether only this process writes the database (driver.Driver.Exclusive):
// then the writer's cache of each stream is authoritative.
func (s *Store) Exclusive() bool { return s.exclusive }

// Caps returns what the driver offers beyond driver.Driver (driver.CapabilitiesOf).
func (s *Store) Caps() driver.Capabilities { return s.caps }

// Logger returns the store's logger.
func (s *Store) Logger() *slog.Logger { return s.log }

// Background is the group of a layer's goroutines that Close waits for (after the layers' close
// effects, before the writer's queue is run out): add to it only while intake is open.
func (s *Store) Background() *sync.WaitGroup { return &s.bgWG }

// Stopping returns a channel Close closes when it stops intake: background loops end on it.
func (s *Store) Stopping() <-chan struct{} { return s.stop }

// Landed are the commit watchers told the path of each commit that lands durable events (the
// event face's WatchCommits): the kernel tells them of other processes' commits (the empty path
// when notifications may have been missed); the layers that land events tell them of this
// process's.
func (s *Store) Landed() *Callbacks[string] { return &s.landed }

// Changes are the commit watchers told the path of every stream each commit changed, here or in
// another process (the empty path: anything may have changed).
func (s *Store) Changes() *Callbacks[string] { return &s.changes }

// NoteCachedRead counts a live read answered from the tail cache; CachedReads is the count.
func (s *Store) NoteCachedRead() { s.cachedReads.Add(1) }

// CachedReads returns how many live reads the tail cache answered.
func (s *Store) CachedReads() int64 { return s.cachedReads.Load() }

// Commits returns how many groups committed.
func (s *Store) Commits() int64 { return s.commits.Load() }

// Unmark drops the stream's mark (Tx.Mark) once it is gone. Writer only.
func (s *Store) Unmark(id int64) { s.ws.marks.remove(id) }

// CachedStream returns the committed entry of the stream at path in the writer's cache, if it is
// there, without counting it as used. Writer only, outside a write (an applied effect): no write
// holds the committed entry then, so a hook may change a row extension of it in place.
func (s *Store) CachedStream(path string) (*StreamState, bool) { return s.ws.streams.peek(path) }

// UntilClose returns a context that Close cancels when it stops intake, and its cancel, which the
// caller calls once done with it.
func (s *Store) UntilClose() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ErrStoreClosed is returned by every operation on a closed store.
var ErrStoreClosed = &foldtype.Error{Code: foldtype.CodeClosed, Message: "stream store is closed"}

// Read runs fn in a read-only transaction, which Close waits for: a consistent snapshot of committed data.
func (s *Store) Read(ctx context.Context, fn func(q driver.Reader) error) error {
	s.reads.Add(1)
	defer s.endRead()
	if s.closed.Load() {
		return ErrStoreClosed
	}
	return s.drv.Read(ctx, fn)
}

// endRead ends a read counted by Read, waking Close when it was the last one after close.
// A read counts itself before it checks closed and Close sets closed before it counts, so a
// read either sees closed or is waited for.
func (s *Store) endRead() {
	if s.reads.Add(-1) == 0 && s.closed.Load() {
		s.readsMu.Lock()
		s.readsDone.Broadcast()
		s.readsMu.Unlock()
	}
}

// waitReads waits (in Close, after closed is set) until no read transaction is in flight.
func (s *Store) waitReads() {
	s.readsMu.Lock()
	for s.reads.Load() > 0 {
		s.readsDone.Wait()
	}
	s.readsMu.Unlock()
}

// Changed returns a channel that is closed at the next commit touching the stream with this id.
// Take the channel before checking the condition you wait for, then wait on it, to never miss a
// commit.
func (s *Store) Changed(streamID int64) <-chan struct{} {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	ch, ok := s.notify[streamID]
	if !ok {
		ch = make(chan struct{})
		s.notify[streamID] = ch
	}
	return ch
}

// wake closes the stream's change channel after a commit whose outcome is not known, dropping
// the stream's tail cache entry.
func (s *Store) wake(streamID int64) { s.wakeWith(streamID, nil, nil) }

// wakeWith is wake after a commit whose outcome is known: row is the stream's row after it and
// recs the durable records it appended (nil row: unknown). The stream's tail cache entry is
// brought up to the commit (or dropped) before the waiters are woken.
func (s *Store) wakeWith(streamID int64, row *driver.Stream, recs []driver.Record) {
	if ch := s.takeWaiters(streamID, row, recs); ch != nil {
		close(ch)
	}
}

// takeWaiters is wakeWith without the wake: it brings the stream's tail cache entry up to the
// commit and unregisters the stream's change channel, in one step under notifyMu, and returns the
// channel (nil: nobody waits) for the caller to close. Between the two, a read sees the commit
// (it is in the database and the cache) and takes a fresh channel; a reader holding the returned
// one wakes when it is closed.
func (s *Store) takeWaiters(streamID int64, row *driver.Stream, recs []driver.Record) chan struct{} {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	s.applyCommit(streamID, row, recs)
	ch, ok := s.notify[streamID]
	if !ok {
		return nil
	}
	delete(s.notify, streamID)
	return ch
}

// quotePath quotes a path for messages.
func quotePath(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }
