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
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver
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
	path   string
	opts   Options
	clock  foldstream.Clock
	log    *slog.Logger
	wdb    *sql.DB // the single writer connection
	rdb    *sql.DB // read-only connections
	writes chan *writeReq

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	writerWG  sync.WaitGroup
	bgWG      sync.WaitGroup // background goroutines other than the writer
	stop      chan struct{}  // closed by Close to stop background loops

	// mem is the writer-owned in-memory state of each stream, keyed by stream id. Only the writer
	// goroutine reads or writes it (see writer.go), so it needs no lock.
	mem map[int64]*streamMem

	notifyMu sync.Mutex
	notify   map[int64]chan struct{} // closed and replaced on every commit touching the stream

	ev         *eventView   // the event view's in-memory state (events.go)
	savepoints atomic.Int64 // savepoints opened by writes; lets tests prove a write ran no SQL
	commits    atomic.Int64 // group commits; benchmarks report events per commit

	protoOnce sync.Once
	protoSt   *protoState // the protocol view's in-memory state (protocol.go)

	created createdListeners // OnStreamCreated's listeners (list.go)

	lock *os.File // the exclusive lock on the database, held until Close (lock.go)
}

var memCounter atomic.Int64

// Open opens (creating if needed) the store in the SQLite file at path. The path ":memory:" opens a
// private in-memory store, for tests.
//
// The store holds an exclusive lock on the file until Close (the sidecar file "<path>-lock"): a
// second Open of the same file, from another process or this one, fails with
// [foldstream.CodeStoreLocked], naming the file and, when known, the holder's pid. A file or
// directory the store cannot write fails with [foldstream.CodeStoreReadOnly].
func Open(path string, opts Options) (_ *Store, err error) {
	if opts.Synchronous == "" {
		opts.Synchronous = SyncFull
	}
	if opts.Synchronous != SyncFull && opts.Synchronous != SyncNormal {
		return nil, fmt.Errorf("open stream store: unknown synchronous mode %q (use FULL or NORMAL)", opts.Synchronous)
	}
	if opts.Clock == nil {
		opts.Clock = foldstream.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = 256
	}
	if opts.ProducerReorderWait == 0 {
		opts.ProducerReorderWait = DefaultProducerReorderWait
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
		// by every write later (storage.go); probeWritable below checks the database itself.
		if err := probeDirWritable(path); err != nil {
			return nil, err
		}
	}

	var wdsn, rdsn string
	if path == ":memory:" {
		// memdb lets several connections share one in-memory database.
		name := fmt.Sprintf("/foldstream-mem-%d", memCounter.Add(1))
		base := "file:" + name + "?vfs=memdb&_pragma=busy_timeout(10000)&_pragma=foreign_keys(on)"
		wdsn, rdsn = base, base
	} else {
		u := "file:" + (&url.URL{Path: path}).EscapedPath()
		common := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(on)"
		wdsn = u + "?" + common + "&_pragma=journal_mode(WAL)&_pragma=synchronous(" + string(opts.Synchronous) + ")"
		rdsn = u + "?" + common + "&_pragma=query_only(1)"
	}

	wdb, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := wdb.Ping(); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	ctx := context.Background()
	for _, stmt := range schema {
		if _, err := wdb.ExecContext(ctx, stmt); err != nil {
			wdb.Close()
			return nil, fmt.Errorf("open stream store %s: create schema: %w", path, err)
		}
	}
	rdb, err := sql.Open("sqlite", rdsn)
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)

	s := &Store{
		path:   path,
		opts:   opts,
		clock:  opts.Clock,
		log:    opts.Logger,
		wdb:    wdb,
		rdb:    rdb,
		writes: make(chan *writeReq, 1024),
		stop:   make(chan struct{}),
		mem:    make(map[int64]*streamMem),
		notify: make(map[int64]chan struct{}),
		ev:     newEventView(),
	}
	conn, err := wdb.Conn(ctx)
	if err != nil {
		s.rdb.Close()
		s.wdb.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	if err := probeWritable(ctx, conn); err != nil {
		conn.Close()
		s.rdb.Close()
		s.wdb.Close()
		return nil, fmt.Errorf("open stream store %s: prove the database takes writes: %w", path, err)
	}
	s.writerWG.Add(1)
	go s.runWriter(conn)
	s.lock = lock
	return s, nil
}

// Path returns the file path the store was opened with.
func (s *Store) Path() string { return s.path }

// Clock returns the store's clock.
func (s *Store) Clock() foldstream.Clock { return s.clock }

// Close stops intake, lets every queued write finish, stops background loops and closes the
// database. It returns the first error met. Calling it again returns the same result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		s.closeEventView()
		s.bgWG.Wait()
		close(s.writes)
		s.writerWG.Wait()
		s.closeErr = errors.Join(s.rdb.Close(), s.wdb.Close(), unlockStore(s.lock))
	})
	return s.closeErr
}

// ErrStoreClosed is returned by every operation on a closed store.
var ErrStoreClosed = &foldstream.Error{Code: foldstream.CodeClosed, Message: "stream store is closed"}

// readTx runs fn in a read-only transaction: a consistent snapshot of committed data.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return ErrStoreClosed
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep
	return fn(tx)
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

// schema is the store's tables. Offsets are integers: for event streams and JSON streams an
// entry is one message and its offset is its 1-based position in the stream's offset sequence;
// for byte streams an entry is one record and its offset is the byte position where it ends.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS streams (
		-- AUTOINCREMENT: a deleted stream's id is never handed to a later stream, so no cache keyed by
		-- id can alias two streams
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		path TEXT NOT NULL UNIQUE,
		content_type TEXT NOT NULL,
		-- 0 live, 1 soft-deleted (kept for its forks; the path stays reserved)
		state INTEGER NOT NULL DEFAULT 0,
		created_ms INTEGER NOT NULL,
		ttl_seconds INTEGER,
		expires_at_ms INTEGER,
		last_access_ms INTEGER NOT NULL,
		closed INTEGER NOT NULL DEFAULT 0,
		closed_by_producer TEXT,
		closed_by_epoch INTEGER,
		closed_by_seq INTEGER,
		-- forks: entries of forked_from with offset <= fork_offset are inherited
		forked_from INTEGER REFERENCES streams(id),
		fork_offset INTEGER NOT NULL DEFAULT 0,
		fork_sub_offset INTEGER NOT NULL DEFAULT 0,
		-- the durable mark: offset of the last committed entry (or the position a fork starts at)
		tail INTEGER NOT NULL DEFAULT 0,
		stream_seq TEXT,
		incarnation INTEGER NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX IF NOT EXISTS streams_forked_from ON streams(forked_from) WHERE forked_from IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS entries (
		stream_id INTEGER NOT NULL,
		offset INTEGER NOT NULL,
		-- offset (exclusive start) of the record (one protocol POST) this entry belongs to
		record_start INTEGER NOT NULL,
		created_ms INTEGER NOT NULL,
		idempotency_key TEXT,
		body BLOB NOT NULL,
		PRIMARY KEY (stream_id, offset)
	) WITHOUT ROWID`,
	`CREATE UNIQUE INDEX IF NOT EXISTS entries_idempotency ON entries(stream_id, idempotency_key) WHERE idempotency_key IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS producers (
		stream_id INTEGER NOT NULL,
		producer_id TEXT NOT NULL,
		epoch INTEGER NOT NULL,
		last_seq INTEGER NOT NULL,
		updated_ms INTEGER NOT NULL,
		PRIMARY KEY (stream_id, producer_id)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS claims (
		path TEXT NOT NULL,
		slug TEXT NOT NULL,
		at_ms INTEGER NOT NULL,
		failures INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (path, slug)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS claims_due ON claims(at_ms)`,
}

// normalizePathForErrors trims a path for messages.
func quotePath(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }
