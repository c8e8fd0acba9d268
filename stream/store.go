// Package stream is foldstream's durable stream store: many streams by path in one database,
// reached through a driver (package driver): an embedded SQLite file written by one process
// (package sqlitedriver), or a PostgreSQL database shared by any number of processes (package
// pgdriver). The store never imports a concrete driver: [OpenDriver] takes one, and package
// storeopen picks one from a file path or a postgres:// URL. One kernel ([Store]: the writer,
// group commit, the insert path, the caches and the per-stream wakes, with the hooks its layers
// register; docs/store.md#the-kernel-and-its-layers) serves the same data through two faces, each
// a type of its own:
//
//   - [Events], the event view (EventStream's Append and Read, subscriptions, checkpoints, claims,
//     wake records) that processor engines and package host run against, and
//   - [Protocol], the Durable Streams protocol view (records, content types, closure, forks, TTL,
//     idempotent producers, subscriptions and webhooks) that package server exposes over HTTP.
//
// # Concurrency
//
// Every write goes through one writer goroutine (see writer.go). Callers hand it a function; the
// writer collects whatever functions are queued, runs each inside its own savepoint of one
// transaction, and commits once (group commit): one fsync covers every caller in the group, and a
// function that fails rolls back to its savepoint without failing its neighbours. On a database
// only this process writes (SQLite) the writer is the only goroutine that assigns offsets, so
// offsets of one stream are strictly increasing without a lock per stream; on a shared database
// the driver serialises writers of one stream across processes (docs/postgres.md). Readers use
// separate read transactions and see committed snapshots.
//
// # Durability
//
// An acknowledged write survives a process crash and a power loss: the drivers commit with
// synchronous=FULL (SQLite) and synchronous_commit on (PostgreSQL) by default. Only
// sqlitedriver.Config.Synchronous may relax this, to NORMAL; it is never the default.
package stream

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

// Config configures a Store. The zero value is valid.
type Config struct {
	// Clock is the time source for createdAt stamps, TTLs, claims and alarms. Defaults to
	// foldtype.SystemClock.
	Clock foldtype.Clock
	// Logger receives the store's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxGroup caps how many queued writes share one transaction. Defaults to 256; negative is
	// refused.
	MaxGroup int
	// MaxCommitsInFlight caps, on a shared database, how many groups' COMMITs may be on their way
	// at once while the writer builds the next group (docs/store.md#one-writer); 1 keeps one
	// commit at a time. Defaults to DefaultMaxCommitsInFlight; negative is refused.
	MaxCommitsInFlight int
	// CommitStallAfter is how long a COMMIT may be on its way before the store reports its
	// commits stalled (CommitsStalled; /readyz answers 503). Defaults to
	// DefaultCommitStallAfter.
	CommitStallAfter time.Duration
	// ProducerReorderWait is how long a protocol append whose producer seq is ahead of the next
	// expected one waits for the earlier seqs (pipelined requests overtaking each other) before
	// it is refused with a sequence gap. Defaults to DefaultProducerReorderWait; negative
	// disables the wait.
	ProducerReorderWait time.Duration
	// MaxCachedStreams caps how many streams the writer keeps in memory (their rows and offset
	// marks); a write to a stream beyond them reads its row first. Defaults to
	// DefaultMaxCachedStreams; negative is refused.
	MaxCachedStreams int
	// MaxEphemeralBytes caps what the ephemeral rings of all streams hold together (each ring is
	// bounded by EphemeralRingBytes on its own): past it, the rings of the streams whose last
	// ephemeral is oldest are dropped whole (docs/store.md#appending). Defaults to
	// DefaultMaxEphemeralBytes (64 MiB); negative is refused.
	MaxEphemeralBytes int
}

// Store is an open stream store: many streams by path in one database, behind one driver
// (docs/store.md). All its methods, and those of its faces, are safe for concurrent use.
//
// Open it with storeopen.Open (a file path or a postgres:// URL) or with [OpenDriver] over a driver
// of your choosing; close it with [Store.Close] after the host and the server on it have shut
// down. A Store is the kernel — the writer and its group commit, the insert path, the caches, the
// per-stream wakes (docs/store.md#the-kernel-and-its-layers) — and offers it through two faces
// (docs/store.md#the-two-faces), and the small transactional face package subscriptions builds on:
//
//   - [Store.Events], the event face that processor engines and the host run against: a path's
//     [EventStream] (Append, Read, a processor's Claim), subscriptions, checkpoints, claims and
//     alarms, wake records;
//   - [Store.Protocol], the Durable Streams protocol face that package server serves over HTTP:
//     create, append and read records, metadata, listing, deletion, TTL expiry, idempotent
//     producers;
//   - [Store.Subscriptions], the rows, locks, wake-event appends, signing keys and lease that
//     package subscriptions needs for the protocol's reserved subscription APIs.
//
// The Store itself only closes and says what it runs on ([Store.Clock], [Store.Driver],
// [Store.Path], [Store.ObserveCommits]).
//
// Rules kept in one place (docs/store.md#one-writer,
// docs/store.md#durability-guarantees-and-their-limits), the same through either face: every write
// goes through one writer goroutine that group-commits whatever is queued, each write in its own
// savepoint, so a refused write never fails its neighbours; a write returns only after its
// transaction committed (durable by the driver's setting), and a refusal is a *foldtype.Error with
// a code from the catalogue; offsets of a stream are assigned by the writer (on a shared database
// under the driver's per-stream lock), gapless and increasing; a commit is handed to the stream's
// subscribers in commit order, and their push ranges chain with no gap; reads see committed data
// only; a deleted stream's incarnation never passes its events, claims or checkpoints to a stream
// created again at its path.
type Store struct {
	events   *Events   // the event face (faces.go)
	protocol *Protocol // the protocol face (faces.go)
	// hooks are what the features layered on the kernel registered at open (hooks.go).
	hooks kernelHooks

	check     appendChecks // SetAppendCheck
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
	// reads counts the read transactions in flight (readTx); Close waits for them before it
	// closes the database, since database/sql's Close does not wait for a connection being
	// opened or used, and such a connection keeps (or creates) the database's files after Close.
	reads     atomic.Int64
	readsMu   sync.Mutex
	readsDone *sync.Cond    // signalled, under readsMu, when the last read after close ends
	stop      chan struct{} // closed by Close to stop background loops

	// ws is the writer-owned state (writer.go); only the writer goroutine touches it.
	ws writerState

	arriving arrivals // producer requests in flight (inflight.go)

	notifyMu sync.Mutex
	notify   map[int64]chan struct{} // closed and replaced on every commit touching the stream
	tails    tailCache               // live reads' cached tails (tailcache.go)
	// cachedReads counts live reads answered from the tail cache.
	cachedReads atomic.Int64

	ev        *eventView   // the event view's in-memory state (events.go)
	commits   atomic.Int64 // group commits; benchmarks report events per commit
	observers commitObservers

	// feeds order publishing on a shared database (feed.go).
	feeds feedSet

	protoOnce sync.Once
	protoSt   *protoState // the protocol view's in-memory state (protocol.go)

	created createdListeners // OnStreamCreated's listeners (list.go)

	changes commitWatchers     // SubscriptionStore.WatchChanges' functions (subscriptionstore.go)
	landed  commitWatchers     // Events.WatchCommits' functions: commits that land events (watch.go)
	subs    *SubscriptionStore // the subscription face (subscriptionstore.go)
}

// OpenDriver opens a store over a driver: it migrates the driver's schema, starts the writer and
// subscribes to the driver's notifications. Close closes the driver; when OpenDriver fails, the
// caller still owns d and closes it. ctx bounds the opening (the migration, the first
// connections); the store's background work runs until Close.
//
// The driver comes from sqlitedriver.Open (a file), pgdriver.Open (a PostgreSQL database), or
// storeopen.Open, which picks one of them from a file path or a postgres:// URL. Config values that
// make no sense (a negative MaxGroup) fail with INVALID_CONFIG.
func OpenDriver(ctx context.Context, d driver.Driver, opts Config) (*Store, error) {
	if d == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, nil, "open stream store: no driver given; open one with sqlitedriver.Open or pgdriver.Open, or use storeopen.Open")
	}
	if opts.MaxCommitsInFlight < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxCommitsInFlight": opts.MaxCommitsInFlight},
			"open stream store: MaxCommitsInFlight is %d; give a positive number of commits, or 0 for the default", opts.MaxCommitsInFlight)
	}
	if opts.MaxGroup < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxGroup": opts.MaxGroup},
			"open stream store: MaxGroup is %d; give a positive number of writes per transaction, or 0 for the default", opts.MaxGroup)
	}
	if opts.MaxCachedStreams < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxCachedStreams": opts.MaxCachedStreams},
			"open stream store: MaxCachedStreams is %d; give a positive number of streams, or 0 for the default", opts.MaxCachedStreams)
	}
	if opts.MaxEphemeralBytes < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxEphemeralBytes": opts.MaxEphemeralBytes},
			"open stream store: MaxEphemeralBytes is %d; give a positive number of bytes, or 0 for the default", opts.MaxEphemeralBytes)
	}
	if opts.MaxEphemeralBytes == 0 {
		opts.MaxEphemeralBytes = DefaultMaxEphemeralBytes
	}
	if opts.MaxCachedStreams == 0 {
		opts.MaxCachedStreams = DefaultMaxCachedStreams
	}
	if opts.Clock == nil {
		opts.Clock = foldtype.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxGroup == 0 {
		opts.MaxGroup = 256
	}
	if opts.MaxCommitsInFlight == 0 {
		opts.MaxCommitsInFlight = DefaultMaxCommitsInFlight
	}
	if opts.CommitStallAfter <= 0 {
		opts.CommitStallAfter = DefaultCommitStallAfter
	}
	if opts.ProducerReorderWait == 0 {
		opts.ProducerReorderWait = DefaultProducerReorderWait
	}
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
	s.useLayers()
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
			s.landed.notify(n.Path)
		}
		s.changes.notify(n.Path)
		return
	}
	s.landed.notify("")
	s.changes.notify("")
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

// untilClose returns a context that Close cancels when it stops intake, and its cancel, which the
// caller calls once done with it.
func (s *Store) untilClose() (context.Context, context.CancelFunc) {
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

// readTx runs fn in a read-only transaction: a consistent snapshot of committed data.
func (s *Store) readTx(ctx context.Context, fn func(q driver.Reader) error) error {
	s.reads.Add(1)
	defer s.endRead()
	if s.closed.Load() {
		return ErrStoreClosed
	}
	return s.drv.Read(ctx, fn)
}

// endRead ends a read counted by readTx, waking Close when it was the last one after close.
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

// normalizePathForErrors trims a path for messages.
func quotePath(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }
