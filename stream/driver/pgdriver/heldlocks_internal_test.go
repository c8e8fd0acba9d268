package pgdriver

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
)

// The locks a write transaction counts as held are the ones PostgreSQL holds for it: a rollback
// to the savepoint forgets exactly the locks taken inside it (since it opened or was last rolled
// back to), and keeps the ones taken before it, in an earlier function, and by a check sent
// outside every savepoint. The store relies on this count to decide whether a write must lock
// (and may split the group) or already holds its stream.
func TestRollbackToSavepointForgetsExactlyTheLocksTakenInsideIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openInternal(t)
	w, err := d.Writer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A stream to check (ExpectStream), committed first.
	created, err := w.Begin(ctx)
	step(err)
	id, err := created.InsertStream(ctx, driver.Stream{Path: "/checked", ContentType: "text/plain", CreatedMs: 1})
	step(err)
	step(created.Commit(ctx))

	wtx, err := w.Begin(ctx)
	step(err)
	defer func() { _ = wtx.Rollback(ctx) }()
	tx := wtx.(*writeTx)
	held := func(want ...int64) {
		t.Helper()
		var got []int64
		for k := range maps.Keys(tx.held) {
			got = append(got, int64(k.key))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("locks counted as held: %v, want %v", got, want)
		}
		// PostgreSQL agrees: another session can take exactly the ones not held.
		sent, err := tx.p.sendAll(ctx, queued{sql: `SELECT 1`})
		step(err)
		step(sent.Close())
		other, err := d.Pool().Begin(ctx)
		step(err)
		defer func() { _ = other.Rollback(ctx) }()
		for _, key := range []int64{101, 102, 103, 104, id} {
			var free bool
			step(other.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int4, $2::int4)`, d.lockCls, int32(key)).Scan(&free))
			if free == slices.Contains(want, key) {
				t.Fatalf("lock %d free to another session: %v, with %v held", key, free, want)
			}
		}
	}

	step(tx.LockStream(ctx, 101)) // before any savepoint
	step(tx.Savepoint(ctx))
	step(tx.LockStream(ctx, 102))
	step(tx.RollbackToSavepoint(ctx))
	held(101)
	step(tx.LockStream(ctx, 103)) // after the rollback, inside the same savepoint
	step(tx.LockStream(ctx, 101)) // held already: stays held
	step(tx.RollbackToSavepoint(ctx))
	held(101)
	step(tx.LockStream(ctx, 103))
	step(tx.ReleaseSavepoint(ctx)) // an earlier function's lock
	step(tx.Savepoint(ctx))
	step(tx.LockStream(ctx, 104))
	want, err := tx.StreamByID(ctx, id)
	step(err)
	step(tx.RollbackToSavepoint(ctx))
	held(101, 103)

	// A check queued while the savepoint is still queued goes before it: a rollback keeps its lock.
	step(tx.ReleaseSavepoint(ctx))
	step(tx.Savepoint(ctx))
	step(tx.ExpectStream(ctx, want, want.Highest))
	step(tx.RollbackToSavepoint(ctx))
	held(101, 103, id)
}

// openInternal opens a driver on a fresh schema of the test server, migrated, closed when the test
// ends (the internal tests' open).
func openInternal(t *testing.T) *Driver {
	t.Helper()
	ctx := context.Background()
	d, err := Open(ctx, Config{URL: pgtest.URL(t), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}
