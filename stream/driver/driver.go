// Package driver is the narrow interface between foldstream's stream store (package stream) and
// the database that holds its log. The store's layers — the event view, the Durable Streams
// protocol view, subscriptions, the ephemeral ring, group commit — are written once
// against it; a driver decides how bytes are stored, the store decides what they mean.
//
// A driver owns the SQL, the schema and its migrations, transactions, and change notifications
// between processes. It never interprets a record's body or frames, never assigns offsets, and
// never judges expiry or producer sequences: the store does, inside the driver's transaction.
//
// The embedded default is package sqlitedriver (one SQLite file, one process). A driver for a
// database shared by several processes (PostgreSQL) implements the same interface; the rules it
// must keep beyond SQLite's are marked "shared databases" below. The behaviour suite every driver
// must pass is package drivertest. The store imports no driver: stream.OpenDriver takes one, and
// package storeopen picks one from a file path or a postgres:// URL. What is particular to one
// database (SQLite's file lock, its result codes) stays in its driver; a driver may offer the
// optional [ErrorClassifier] and [Locator] for the store to use.
//
// # Transactions
//
// The store runs every write on one goroutine (its writer), through the single [Writer] it got
// from [Driver.Writer]: the writer begins one transaction, runs each queued write function inside
// its own savepoint, and commits once (group commit). Reads run in separate read transactions
// ([Driver.Read]) that see committed data only. Every [Tx] method runs inside the current write
// transaction and is called only from the writer goroutine; [Reader] methods are also offered by
// read transactions, which may run concurrently with each other and with the writer.
//
// # Positions
//
// A stream's positions are integers. For JSON streams a position is a message's offset in the
// stream's offset sequence (1, 2, ...); for byte streams it is a byte position. A stored [Record]
// covers the positions (Start, End]; records of one stream never overlap, and a stream's durable
// tail is the largest End of its records, or the stream row's BaseTail when that is larger.
package driver

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Driver is a storage backend for the stream store.
type Driver interface {
	// Migrate creates the schema or brings it to the version this driver writes. The store calls it
	// once from OpenDriver, before Writer and before anything else; calling it again before Writer
	// changes nothing. It must be safe when several processes start at once (shared databases:
	// apply migrations under a lock), must record each applied version, and must refuse — with a
	// *foldtype.Error of code STORE_SCHEMA saying what to do — a database whose schema it does not
	// know (written by a newer version), never misread it. Each migration is all or nothing.
	Migrate(ctx context.Context) error

	// Exclusive reports whether this process is the only writer of the database (SQLite holds an
	// exclusive lock on its file). When true, the store keeps each stream's row and tail in its
	// writer's memory between transactions. When false (shared databases) the store calls
	// [Tx.LockStream] and re-reads the stream row inside every write transaction that touches it.
	Exclusive() bool

	// Writer returns the write connection. The store calls it once and uses it from one
	// goroutine only. Closing the driver closes it.
	Writer(ctx context.Context) (Writer, error)

	// Read runs fn in a read-only transaction that sees a consistent snapshot of committed data.
	// Safe for concurrent use. The Reader is valid only during fn.
	Read(ctx context.Context, fn func(Reader) error) error

	// Listen calls fn for every [Notification] committed by other processes sharing the database,
	// until ctx ends or the returned stop function is called. fn must not block. A driver whose
	// database has no other writers (SQLite) returns a no-op stop and never calls fn. A driver
	// whose notification channel drops must recover by itself and call fn with a zero
	// Notification (StreamID 0: "anything may have changed") once it is back, so waiters re-read.
	Listen(ctx context.Context, fn func(Notification)) (stop func(), err error)

	// Leases name which process runs a piece of work (a processor on a stream) at a time; see
	// [Lease]. Each lease operation is its own short transaction, never part of the writer's
	// (a lease row is never locked while a group of writes commits). An exclusive driver (SQLite,
	// whose file lock makes the process the only one) may keep leases in memory: nothing outside
	// the process can hold one, and none survives the process.
	//
	// AcquireLease gives lease key to holder for ttl when the lease is free, expired, released,
	// or already holder's, and reports whether it did. Every acquisition — a first one, a
	// takeover, or holder acquiring its own lease again — increments the generation, which fences
	// the writes made under every earlier one ([Fence]). addr is where holder serves (stored
	// with the lease for other processes to read).
	AcquireLease(ctx context.Context, key, holder, addr string, ttl time.Duration) (Lease, bool, error)
	// RenewLeases extends by ttl each of held (by Key and Generation) that holder still holds
	// and did not release, and returns those it renewed; a lease missing from the result changed
	// hands, and its holder must stop the work at once. A lease that ran out but that nobody took
	// over is renewed: nobody wrote under another generation. A held lease whose Status is not
	// empty stores it as the lease's status (an empty one leaves the stored status as it is).
	RenewLeases(ctx context.Context, holder string, held []Lease, ttl time.Duration) ([]Lease, error)
	// ReleaseLease gives lease l up at once when its holder still holds it at its generation.
	// With idle, the holder left nothing to do (Lease.Idle reads true): another process takes
	// the work only when it has some. Otherwise the lease reads as expired, and another process
	// takes it over now (a shutdown or a handoff), and a driver that implements
	// [LeaseWatcher] announces the release.
	ReleaseLease(ctx context.Context, l Lease, idle bool) error
	// Leases returns the leases each query selects, as stored now: the results of qs in order,
	// each in key order (a lease two queries select is returned twice). A shared driver runs
	// all of qs in one round trip.
	Leases(ctx context.Context, qs ...LeaseQuery) ([]Lease, error)

	// Close releases the driver's connections. Called once, after the writer's last commit.
	Close() error
}

// Writer is the store writer's connection. Not safe for concurrent use.
type Writer interface {
	// Begin starts a write transaction (SQLite: BEGIN IMMEDIATE).
	Begin(ctx context.Context) (WriteTx, error)
}

// WriteTx is a write transaction with savepoints: the store runs each write function of a group
// between Savepoint and ReleaseSavepoint (rolling back to the savepoint first when it failed), so
// one refused write never fails its neighbours. Savepoints do not nest.
type WriteTx interface {
	Tx
	// Savepoint opens the savepoint of the next write function.
	Savepoint(ctx context.Context) error
	// RollbackToSavepoint undoes everything since Savepoint (the savepoint stays open).
	RollbackToSavepoint(ctx context.Context) error
	// ReleaseSavepoint closes the savepoint, keeping its changes in the transaction.
	ReleaseSavepoint(ctx context.Context) error
	// Commit makes the transaction durable (fsync, by the driver's durability setting) before it
	// returns. On error nothing of the transaction may become visible, now or after a crash.
	Commit(ctx context.Context) error
	// Rollback abandons the transaction. Safe after a failed Commit.
	Rollback(ctx context.Context) error
}

// Reader is what read and write transactions both offer. Slices in the values passed to
// callbacks are valid only during the callback.
type Reader interface {
	SubscriptionReader
	// StreamByPath returns the stream row at path (any state), or ErrNoStream. Its Tail is the
	// durable tail as of this transaction.
	StreamByPath(ctx context.Context, path string) (Stream, error)
	// StreamByID returns the stream row with id, or ErrNoStream.
	StreamByID(ctx context.Context, id int64) (Stream, error)
	// ChildStreams returns the streams forked from id.
	ChildStreams(ctx context.Context, id int64) ([]Stream, error)
	// ListStreams returns live streams (State 0) whose path is in the range q names, in byte-wise
	// path order, at most q.Limit of them.
	ListStreams(ctx context.Context, q ListQuery) ([]Stream, error)
	// CountStreams counts stream rows (any state).
	CountStreams(ctx context.Context) (int, error)
	// CollectCandidates returns up to limit streams with id > afterID, in id order, that are
	// soft-deleted, past their absolute expiry (ExpiresAtMs <= nowMs), or whose sliding TTL ran out
	// by the persisted last access (LastAccessMs + TTLSeconds*1000 <= nowMs).
	CollectCandidates(ctx context.Context, afterID, nowMs int64, limit int) ([]Stream, error)
	// Records calls fn for the records of stream streamID with End > after, in End order, until
	// fn returns false or an error (which Records returns). A driver must stream them: memory
	// must not grow with the number or size of the records read.
	Records(ctx context.Context, streamID, after int64, fn func(Record) (bool, error)) error
	// KeyOffset returns the offset registered under an idempotency key in stream streamID.
	KeyOffset(ctx context.Context, streamID int64, key string) (offset int64, found bool, err error)
	// Producer returns an idempotent producer's state on a stream.
	Producer(ctx context.Context, streamID int64, producerID string) (Producer, bool, error)
	// Claims returns every claim, earliest first (then by path and slug).
	Claims(ctx context.Context) ([]Claim, error)
	// DueClaims returns the claims with AtMs <= nowMs, earliest first (then by path and slug).
	DueClaims(ctx context.Context, nowMs int64) ([]Claim, error)
	// NextClaimAt returns the earliest claim's AtMs.
	NextClaimAt(ctx context.Context) (atMs int64, ok bool, err error)
	// Checkpoint returns a processor's checkpoint row; a NULL or empty state reads as nil.
	Checkpoint(ctx context.Context, scope, slug string) (foldtype.Checkpoint, bool, error)
	// CheckpointsOfSlug calls fn with processor slug's checkpoint row in each of scopes that has
	// one (a NULL or empty state reads as nil, as Checkpoint reads it), in no particular order,
	// reading them in one query however many scopes there are: a bulk verb reads the rows of a
	// page of streams at once (docs/operations.md#bulk-verbs).
	CheckpointsOfSlug(ctx context.Context, slug string, scopes []string, fn func(scope string, cp foldtype.Checkpoint)) error
}

// Tx is the write side of a transaction. Every method runs inside the writer's current
// transaction (and savepoint) and only on the writer goroutine.
type Tx interface {
	Reader
	SubscriptionTx
	// LockStream serialises writers of one stream across processes until the transaction ends
	// (shared databases: a transaction-scoped advisory lock on the id; the store then re-reads
	// the stream row for its tail). Exclusive drivers may do nothing.
	LockStream(ctx context.Context, id int64) error
	// InsertStream inserts a stream row (ID ignored) and returns its id. The id of a deleted
	// stream is never handed out again. An id whose insert was rolled back may be (SQLite does),
	// so the store caches nothing keyed by an id before its transaction committed.
	InsertStream(ctx context.Context, s Stream) (int64, error)
	// UpdateStream changes the fields set in u.
	UpdateStream(ctx context.Context, id int64, u StreamUpdate) error
	// DeleteStream removes the stream row with its records, idempotency keys and producers.
	DeleteStream(ctx context.Context, id int64) error
	// DeleteProcessorState removes the checkpoints (scope path), claims, processor state rows and
	// parked events of the stream at path: they belong to the incarnation being deleted, so a
	// stream created at the path again starts its processors afresh. The store calls it with every delete, soft or hard.
	DeleteProcessorState(ctx context.Context, path string) error
	// InsertRecord stores one record (or one slice of a large record) with its idempotency keys.
	// A key already registered on the stream is an error; the store checks keys first.
	InsertRecord(ctx context.Context, r Record) error
	// PutProducer stores a producer's state on a stream (insert or replace).
	PutProducer(ctx context.Context, streamID int64, p Producer) error
	// PutClaim inserts a claim or moves an existing one to c.AtMs with c.Failures.
	PutClaim(ctx context.Context, c Claim) error
	// DeleteClaim removes a claim. With exact, only when its AtMs and Failures still equal c's.
	DeleteClaim(ctx context.Context, c Claim, exact bool) error
	// WriteCheckpoint upserts a processor's checkpoint: version and cursor always, the state
	// only when w.StateChanged (else the stored state stays). With w.Fence set, the write first
	// checks the fence inside this transaction and fails with a foldtype.Error of code
	// LEASE_LOST, writing nothing, when the lease's generation is no longer w.Fence.Generation.
	WriteCheckpoint(ctx context.Context, w CheckpointWrite) error
	// CheckFence fails with a foldtype.Error of code LEASE_LOST (what names the write) when f's
	// lease is no longer held at f.Generation; a nil f passes. On a shared database it holds the
	// lease row against a takeover until the transaction ends, so a write made after it in the
	// same transaction commits only while the lease is still f's: a processor's emitted events
	// are fenced as its checkpoints are.
	CheckFence(ctx context.Context, f *Fence, what string) error
	// Notify queues a notification that other processes receive through Listen once this
	// transaction commits (and never if it rolls back). Exclusive drivers may drop it.
	Notify(ctx context.Context, n Notification) error
}

// HidingTx is implemented by a driver's write transaction when the driver keeps a per-stream
// visibility mark, so the store may write one large record over several transactions (each slice
// in its own commit, between other writers' groups) and still show it to readers all at once. The
// store uses it only on exclusive drivers; a driver without it gets large records in one
// transaction.
//
// While a stream's mark is set, its records with End > the mark are invisible to every Reader
// (Records skips them and the stream row's Tail ignores them), in this transaction and in read
// transactions alike. The mark is durable, and a driver drops whatever it still hides when its
// Writer is created (after a crash mid-record), before the store writes anything.
type HidingTx interface {
	// HideFrom sets stream streamID's mark at from: records with End > from become invisible.
	HideFrom(ctx context.Context, streamID, from int64) error
	// ShowAll clears the mark: every record of the stream is visible once this transaction commits.
	ShowAll(ctx context.Context, streamID int64) error
	// DropHidden removes the stream's records (and idempotency keys) past the mark, and clears it.
	DropHidden(ctx context.Context, streamID int64) error
}

// LockKeeper is implemented by a shared driver's write transaction that may release its stream
// locks before it ends: pgdriver commits the group's earlier functions early rather than wait for a
// contended lock while holding theirs (docs/postgres.md#writes-round-trips). A row read under a
// lock that was released since is stale (another process may have appended meanwhile), even if the
// lock was taken again, so before the store reuses a row an earlier function of the group read, it
// compares the epoch and otherwise reads the row again under the lock. A function's own locks
// (taken with LockStream since its savepoint) are never released while it runs.
//
// Releasing the locks commits everything the transaction did so far, and that commit stands
// whatever becomes of the rest of the transaction: the epoch moves on exactly when such a commit
// succeeded. So a function of the group is committed when the epoch read right after it ran
// (its savepoint released) is below the epoch at the transaction's end; the store answers it
// success, applies its changes and runs its hooks even when the final Commit (or anything after
// the early commit) fails.
type LockKeeper interface {
	// LockEpoch counts the times the transaction released its locks so far.
	LockEpoch() int
}

// EarlyCommitWatcher is implemented by a LockKeeper transaction that tells the store the moment
// an early commit succeeded, while the function that caused it still waits for its lock: the
// earlier functions are durable from then on, and the store lets this process's readers of their
// streams see them at once instead of when the whole group ends (another process hears of them
// by the early commit's notification). fn runs in the goroutine that called into the
// transaction; it must not call the transaction.
type EarlyCommitWatcher interface {
	OnEarlyCommit(fn func())
}

// StreamPrefetcher is implemented by a shared driver's write transaction that can read the rows
// of several streams at once, each under its lock when that lock is free at once, in one round
// trip. The store calls it right after Begin with the paths its group's writes are about to write;
// a later StreamByPath of one of them is then answered from the row read (no round trip) as long
// as the transaction still holds that lock and has not written to the stream since. Paths whose
// lock was taken, or whose row does not exist, are read again as usual. Locks it takes count as
// taken before the first savepoint, like any lock held by the transaction.
type StreamPrefetcher interface {
	PrefetchStreams(ctx context.Context, paths []string) error
}

// StreamExpecter is implemented by a shared driver's write transaction that can check a stream's
// row without a round trip: ExpectStream queues a check that takes the stream's lock when it is
// free at once and then finds the row as want has it (every stored column but the last access,
// want.Tail as the durable tail, and at most highest as the highest offset handed out). The check
// runs with the transaction's next round trip, in order with the statements queued after it; when
// it does not hold, that round trip fails with a *StaleStreamError and nothing queued after the
// check runs. The store uses it for a stream whose row it knows from its own last commit
// (docs/postgres.md#writes-round-trips): the write is then sent with the commit, and when another
// process changed the stream meanwhile the store runs it again, reading the row under the lock.
type StreamExpecter interface {
	ExpectStream(ctx context.Context, want Stream, highest int64) error
}

// StaleStreamError reports that a stream's row was not what a StreamExpecter check expected:
// another process changed the stream (or held its lock). Whatever the transaction queued after the
// check did not run.
type StaleStreamError struct {
	StreamID int64
	Err      error
}

func (e *StaleStreamError) Error() string {
	return fmt.Sprintf("stream %d changed since this process last wrote it: %v", e.StreamID, e.Err)
}

func (e *StaleStreamError) Unwrap() error { return e.Err }

// FreshStreamInserter is implemented by a write transaction that can insert a stream row only
// when no row holds its path, in one statement. The store uses it to create a stream it has no
// row of in memory without first reading its path (on an exclusive driver, a fresh path is the
// common case of a create); when the path is taken it reads the row and decides as usual.
type FreshStreamInserter interface {
	// InsertStreamIfAbsent inserts s (ID ignored) unless a stream row, live or soft-deleted,
	// holds s.Path. It returns the new id and true, or false and writes nothing when the path
	// is taken. Ids are handed out as by InsertStream.
	InsertStreamIfAbsent(ctx context.Context, s Stream) (int64, bool, error)
}

// ErrNoStream is returned by StreamByPath and StreamByID when no row matches.
var ErrNoStream = errors.New("no such stream")

// Stream is one stream row.
type Stream struct {
	ID          int64
	Path        string
	ContentType string
	// State is 0 for a live stream, 1 for a soft-deleted one (kept for its forks).
	State            int
	CreatedMs        int64
	TTLSeconds       sql.NullInt64
	ExpiresAtMs      sql.NullInt64
	LastAccessMs     int64
	Closed           bool
	ClosedByProducer sql.NullString
	ClosedByEpoch    sql.NullInt64
	ClosedBySeq      sql.NullInt64
	// ForkedFrom is the source stream of a fork; positions <= ForkOffset are read from it.
	ForkedFrom    sql.NullInt64
	ForkOffset    int64
	ForkSubOffset int64
	// BaseTail is the tail a stream starts from (a fork's fork point). Stored.
	BaseTail int64
	// Tail is the durable tail: max(BaseTail, largest End of the stream's records). Computed by
	// the driver on every read of the row; ignored by InsertStream.
	Tail        int64
	StreamSeq   sql.NullString
	Incarnation int64
	// Highest is the highest offset handed out, ephemerals included, as recorded by
	// StreamUpdate.Highest (shared databases: ephemeral offsets come from one sequence on every
	// node). Exclusive drivers may leave it 0: their store keeps it in memory.
	Highest int64
	// Paused is valid while the stream is paused; String is the pause's reason. The store sets it
	// when a pause or resume control event lands, in the same transaction.
	Paused sql.NullString
}

// ListQuery is a range of stream paths: those after From (or equal to it when Inclusive) and,
// when Below is not empty, before Below.
type ListQuery struct {
	From      string
	Inclusive bool
	Below     string
	Limit     int
}

// StreamUpdate names the stream fields an UpdateStream changes; nil fields stay.
type StreamUpdate struct {
	// LastAccessMs moves the persisted last access forward (never back).
	LastAccessMs *int64
	// StreamSeq sets the last Stream-Seq.
	StreamSeq *string
	// Close closes the stream, naming the producer request that closed it (if any).
	Close *ClosedBy
	// State sets the state (1: soft-deleted).
	State *int
	// Incarnation sets the wake-record counter.
	Incarnation *int64
	// Highest moves the recorded highest handed-out offset forward (never back). Shared
	// databases only; it needs no durability (an ephemeral's offset may be handed out again
	// after a crash). Exclusive drivers may ignore it.
	Highest *int64
	// Paused sets the pause state (an invalid value clears it: the stream is resumed).
	Paused *sql.NullString
}

// ClosedBy is the producer request that closed a stream; zero Producer for a plain close.
type ClosedBy struct {
	Producer   string
	Epoch, Seq int64
}

// Record is one stored row of a stream's log: a whole appended record (one protocol POST, one
// producer batch, one event-view batch), or one slice of a large one. Positions (Start, End];
// RecordStart is the Start of the record the slice belongs to (equal to Start for a whole record).
//
// Body and Frames are opaque to the driver. For JSON streams the store writes the messages
// joined by commas and Frames as described at [AppendFrame]; for byte streams Body holds the bytes
// of positions (Start, End] and Frames is nil.
type Record struct {
	StreamID    int64
	RecordStart int64
	Start, End  int64
	CreatedMs   int64
	Frames      []byte
	Body        []byte
	// Keys are the idempotency keys of the record's messages (InsertRecord only).
	Keys []Key
}

// Key is an idempotency key registered at an offset.
type Key struct {
	Key    string
	Offset int64
}

// Producer is an idempotent producer's state on one stream.
type Producer struct {
	ID        string
	Epoch     int64
	LastSeq   int64
	UpdatedMs int64
}

// Claim is a durable "revive processor Slug of the stream at Path by AtMs".
type Claim struct {
	Path, Slug string
	AtMs       int64
	Failures   int
}

// CheckpointWrite is one checkpoint upsert.
type CheckpointWrite struct {
	Scope, Slug  string
	Checkpoint   foldtype.Checkpoint
	StateChanged bool
	// Fence, when set, makes the write conditional on a lease still held.
	Fence *Fence
	// Remove names rows of the same scope the write deletes, in the same transaction (a
	// rebuild's switch deletes its side row as it replaces the processor's row).
	Remove []string
}

// Fence names a lease and the generation the writer holds; a process that lost its lease sees
// another generation (or none) there.
type Fence struct {
	Key        string
	Generation int64
}

// Lease says that Holder runs the work named by Key until Expires
// (docs/postgres.md#processors-and-leases). Expiry is judged by the database's clock on shared
// databases, so the processes' clocks never need to agree; Expires converts it to this process's
// clock with the start of the round trip, so it errs early.
type Lease struct {
	// Key names the work.
	Key string
	// Holder is the process that holds (or last held) the lease, and Addr where it serves.
	Holder, Addr string
	// Generation grows with every acquisition; writes fenced by an older one fail.
	Generation int64
	// Expires is when the lease runs out unless renewed, by this process's clock.
	Expires time.Time
	// Live reports whether the lease was unexpired (and not released) when read.
	Live bool
	// Idle reports a lease released with nothing left to do (ReleaseLease with idle).
	Idle bool
	// Status is what the holder last reported of the work (RenewLeases stores it), opaque to
	// the driver: the host keeps a processor's state there, so every process can show it.
	Status string
}

// LeaseQuery selects leases for [Driver.Leases]: those whose key starts with Prefix, in key
// order, narrowed by Keys, Live or Free, after After, at most Limit of them.
type LeaseQuery struct {
	// Prefix selects the keys that start with it ("" selects every key).
	Prefix string
	// Keys, when not nil, selects only these keys (an empty non-nil slice selects none).
	Keys []string
	// Live selects only live leases (unexpired and not released).
	Live bool
	// Free selects only the leases waiting for a taker: expired, or released for a takeover
	// (not live, and not released idle).
	Free bool
	// After, when set, selects only the keys after it (paging in key order).
	After string
	// Limit, when positive, returns at most that many leases: the first in key order.
	Limit int
}

// Fence returns the fence of writes made under l.
func (l Lease) Fence() *Fence { return &Fence{Key: l.Key, Generation: l.Generation} }

// Notification tells other processes that a stream changed.
type Notification struct {
	// StreamID is the stream that changed; 0 means "anything may have changed".
	StreamID int64
	// Path is the stream's path, when known.
	Path string
	// Ephemeral, when set, is a JSON value the store attaches — the ephemeral events the
	// transaction's writes appended to the stream, which the database never stores — delivered
	// with the notification to the other processes (shared databases; a driver may carry a large
	// one out of band). Exclusive drivers drop it with the notification.
	Ephemeral []byte
	// Stream, when set, is the stream's row after the transaction (Tail is its durable tail),
	// and Records are the durable records the transaction appended to it, in position order,
	// Keys left out. A process that knew the stream up to the first record's Start knows it up to
	// Stream.Tail without reading the database (docs/postgres.md#live-reads). A driver may drop
	// both (a payload too large to carry them); the receiver then reads. Nil when the stream was
	// deleted.
	Stream  *Stream
	Records []Record
}

// AppendFrame appends one JSON message's frame to frames: the uvarint of the message's offset
// minus the previous message's offset (the first message's: minus the record's Start), then the
// uvarint of its length in bytes. In Body the messages follow each other in frame order with one
// comma between two messages, so a whole record reads back as a JSON array by adding brackets.
func AppendFrame(frames []byte, offsetDelta int64, length int) []byte {
	frames = binary.AppendUvarint(frames, uint64(offsetDelta))
	return binary.AppendUvarint(frames, uint64(length))
}

// EachFrame calls fn with each message of a JSON record: its offset and its bytes within body.
// It stops when fn returns false. A malformed record is an error.
func EachFrame(r Record, fn func(offset int64, msg []byte) bool) error {
	off, pos := r.Start, 0
	frames := r.Frames
	for len(frames) > 0 {
		d, n := binary.Uvarint(frames)
		if n <= 0 {
			return fmt.Errorf("stream record (%d, %d]: corrupt frames", r.Start, r.End)
		}
		frames = frames[n:]
		l, n := binary.Uvarint(frames)
		if n <= 0 || pos+int(l) > len(r.Body) {
			return fmt.Errorf("stream record (%d, %d]: corrupt frames", r.Start, r.End)
		}
		frames = frames[n:]
		off += int64(d)
		if !fn(off, r.Body[pos:pos+int(l)]) {
			return nil
		}
		pos += int(l) + 1
	}
	return nil
}

// ReadCheckpoint reads scope/slug's checkpoint row in one read transaction run by read (a
// driver's or store's Read).
func ReadCheckpoint(ctx context.Context, read func(context.Context, func(Reader) error) error, scope, slug string) (foldtype.Checkpoint, bool, error) {
	var cp foldtype.Checkpoint
	var ok bool
	err := read(ctx, func(r Reader) error {
		var err error
		cp, ok, err = r.Checkpoint(ctx, scope, slug)
		return err
	})
	return cp, ok, err
}

// CheckCheckpointSize refuses, before anything is written, a changed state over
// [foldtype.MaxCheckpointChars] UTF-16 code units with [foldtype.CheckpointTooLargeError].
func CheckCheckpointSize(slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	if stateChanged && cp.State != nil {
		if n := foldtype.UTF16Len(string(cp.State)); n > foldtype.MaxCheckpointChars {
			return foldtype.CheckpointTooLargeError(slug, n)
		}
	}
	return nil
}

// CommitProber is a driver that can check whether commits go through: ProbeCommit commits a
// transaction that writes nothing of the store's but is a real commit to the database (on
// PostgreSQL it takes a transaction id, so it waits for a synchronous standby as writes do). The
// store probes while its commits stall, to find out by itself when they flow again.
type CommitProber interface {
	ProbeCommit(ctx context.Context) error
}

// ReasonCollision is the "reason" in the data of an UNAVAILABLE error that refuses a write for
// colliding with another process's concurrent one: the database answered, a retry may succeed
// at once. Other UNAVAILABLE errors say the database cannot be reached.
const ReasonCollision = "collision"
