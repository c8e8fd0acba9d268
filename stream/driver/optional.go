package driver

import (
	"context"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// LeaseWatcher is an optional interface of a [Driver] that tells its process when a lease was
// released for a takeover (ReleaseLease, not idle) — by another process sharing the database, or
// by a holder in this process — so a process waiting to take the work over takes
// it at once instead of at its next look at the lease table. A released lease may go
// unannounced (a lost notification): watchers must still look now and then.
type LeaseWatcher interface {
	// WatchLeases calls fn with the key and holder of every lease released for a takeover in
	// this process or, on a shared database, in another process, until stop is called. fn must
	// not block; it may be called on the releasing goroutine.
	WatchLeases(fn func(key, holder string)) (stop func())
}

// LeaseBatchReleaser is an optional interface of a [Driver] that gives several leases up in one
// transaction (one round trip on a shared database): a node shutting down releases its node lease
// and the leases of the engines that closed meanwhile together (docs/postgres.md#graceful-hand-over).
// ReleaseLeases does for each of ls what ReleaseLease does — leases their holder no longer holds
// at their generation are left as they are — and announces the released ones together.
type LeaseBatchReleaser interface {
	ReleaseLeases(ctx context.Context, ls []Lease, idle bool) error
}

// ReleaseLeases gives ls up through d: in one call when d is a [LeaseBatchReleaser], else one
// ReleaseLease per lease (the first error is returned, after trying every lease).
func ReleaseLeases(ctx context.Context, d Driver, ls []Lease, idle bool) error {
	if len(ls) == 0 {
		return nil
	}
	if b, ok := d.(LeaseBatchReleaser); ok {
		return b.ReleaseLeases(ctx, ls, idle)
	}
	var first error
	for _, l := range ls {
		if err := d.ReleaseLease(ctx, l, idle); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ErrorClassifier is an optional interface of a [Driver] whose database reports, in error values
// of its own, conditions the store gives a code from the catalogue: a full disk
// (INSUFFICIENT_STORAGE, see [InsufficientStorageError]) or a database that cannot be written
// (STORE_READ_ONLY). The store passes every failed write, and a failed migration at open, through
// ClassifyError. It returns err unchanged when it recognises nothing.
type ErrorClassifier interface {
	ClassifyError(err error) error
}

// Locator is an optional interface of a [Driver] that can name its database for logs and
// messages: a file path, or a URL with its password removed. The store reports it as its Path.
type Locator interface {
	Location() string
}

// InsufficientStorageError is the refusal of a write that found the disk full: nothing of it was
// committed, and a retry once space is free can succeed.
func InsufficientStorageError(cause error) *foldtype.Error {
	return &foldtype.Error{Code: foldtype.CodeInsufficientStorage, Retryable: true, Err: cause,
		Message: "stream store: the disk is full; nothing was written, retry once space is free"}
}

// SizedRecordsReader is an optional interface of a [Reader] that reads a page of records at a
// time. RecordsWithin hands fn the records of stream streamID with End > after, in End order, as
// Records does, until fn returns false, the records end, or the next record is one a page of
// budget bytes of bodies does not take — then it returns stopped true, and that record and those
// after it are left for the next page. A page takes its first record, then whole records while
// they fit in the budget, and ends at the first that does not fit once it is at least half full
// (while it is less than half full, that record is handed too, for the page to take in part). So
// a driver that reads in chunks fetches what the page takes, not more.
type SizedRecordsReader interface {
	RecordsWithin(ctx context.Context, streamID, after int64, budget int, fn func(Record) (bool, error)) (stopped bool, err error)
}

// CheckpointRowsReader is an optional interface of a [Reader] that reads several checkpoint rows
// of one scope in one query. CheckpointRows calls fn with each row of slugs found (a NULL or empty
// state reads as nil, as Checkpoint reads it), in no particular order. Opening an engine reads its
// checkpoint and its work-started marker this way.
type CheckpointRowsReader interface {
	CheckpointRows(ctx context.Context, scope string, slugs []string, fn func(slug string, cp foldtype.Checkpoint)) error
}

// ReadCheckpointRows reads the rows of slugs through q: in one query when q is a
// CheckpointRowsReader, else one Checkpoint call per slug.
func ReadCheckpointRows(ctx context.Context, q Reader, scope string, slugs []string, fn func(slug string, cp foldtype.Checkpoint)) error {
	if r, ok := q.(CheckpointRowsReader); ok && len(slugs) > 1 {
		return r.CheckpointRows(ctx, scope, slugs, fn)
	}
	for _, slug := range slugs {
		cp, ok, err := q.Checkpoint(ctx, scope, slug)
		if err != nil {
			return err
		}
		if ok {
			fn(slug, cp)
		}
	}
	return nil
}

// StreamlessCheckpointFinder is an optional interface of a read transaction ([Reader]) of an
// exclusive [Driver] (one process owns the database, every write goes through its store): it
// tells whether any checkpoint row's scope names a path no stream row holds. The store asks once,
// in a read of its own, when it first creates a stream for a host to open engines on; when none
// does, the checkpoint rows of a stream it creates after the answer can only be those written
// through its writer (docs/store.md#engines-of-a-pattern).
type StreamlessCheckpointFinder interface {
	HasStreamlessCheckpoints(ctx context.Context) (bool, error)
}

// PoolStats are the figures of a driver's connection pool at one moment ([PoolStatser]).
type PoolStats struct {
	// Acquired, Idle and Total are the pool's connections in use, idle, and all of them (those
	// being opened included); Max is the most it opens.
	Acquired, Idle, Total, Max int
	// Acquires counts the connections handed out so far; Waits those of them that had to wait
	// for one (none was idle), and WaitTime the time they waited in all.
	Acquires, Waits int64
	WaitTime        time.Duration
}

// PoolStatser is an optional interface of a [Driver] with a pool of connections to a shared
// database (PostgreSQL): the server's metrics read it at scrape time.
type PoolStatser interface {
	PoolStats() PoolStats
}

// ListenBarrier is implemented by a driver whose Listen hears other processes' commits by
// notification (PostgreSQL): a live read answered from what those notifications brought is only
// as fresh as the last one heard, and a notification may still be on its way — or lost with a
// connection the listener does not yet know is dead.
type ListenBarrier interface {
	// ListenBarrier returns nil once every notification of a transaction that committed before
	// the call has been handed to Listen's fn (and fn returned). It fails when that cannot be
	// known soon — the listener is not connected, or its own marker did not come back within a
	// short bound — and the caller then reads the database itself. Concurrent callers share one
	// round trip.
	ListenBarrier(ctx context.Context) error
}
