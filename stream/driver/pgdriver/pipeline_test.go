package pgdriver_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// TestAppendsTakeFewRoundTrips pins the write path's round trips
// (docs/postgres.md#writes-round-trips): a plain append alone in its group costs 2 (BEGIN,
// SAVEPOINT, the stream's lock and row; the record, RELEASE, pg_notify and COMMIT), an idempotent
// producer's batch 3 (its producer row is read under the lock), where sending each statement by
// itself cost 11–12.
func TestAppendsTakeFewRoundTrips(t *testing.T) {
	t.Parallel()
	d := open(t, pgtest.URL(t))
	ctx := context.Background()
	st, err := stream.OpenDriver(ctx, d, stream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if _, err := st.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/rt", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	measure := func(name string, req stream.AppendRequest, want int64) {
		t.Helper()
		before := testhooks.PGWriteRoundTrips(d)
		if _, err := st.Protocol().AppendRecord(ctx, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := testhooks.PGWriteRoundTrips(d) - before; got > want {
			t.Errorf("%s took %d round trips to the database, want at most %d", name, got, want)
		}
	}
	for i := range 3 {
		slack := int64(0)
		if i == 0 {
			slack = 100 // statements are prepared on first use, once per connection
		}
		measure("plain append", stream.AppendRequest{Path: "/rt", ContentType: "application/json", Body: []byte(`[1,2,3]`)}, 2+slack)
		measure("producer batch", stream.AppendRequest{Path: "/rt", ContentType: "application/json", Body: []byte(`[4,5,6]`),
			Producer: &stream.ProducerHeaders{ID: "p", Epoch: 0, Seq: int64(i)}}, 3+slack)
	}
	res, err := st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: "/rt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Body); got != "[1,2,3,4,5,6,1,2,3,4,5,6,1,2,3,4,5,6]" {
		t.Fatalf("stream holds %s", got)
	}
}

// execer is the raw statement hook of the driver's write transactions.
type execer interface {
	Exec(ctx context.Context, query string, args ...any) error
}

// TestQueuedStatementThatFailsRefusesTheGroupOrOnlyItsFunction checks how a failed statement
// that was queued (sent later, with the next read or the commit) is attributed: one queued in the
// current write function fails that function alone, which is rolled back to its savepoint while
// the group's other functions commit; one queued by an earlier function — whose write the store
// already counts as done — refuses the whole group, so nothing is acknowledged without its data.
func TestQueuedStatementThatFailsRefusesTheGroupOrOnlyItsFunction(t *testing.T) {
	t.Parallel()
	d := open(t, pgtest.URL(t))
	ctx := context.Background()
	w, err := d.Writer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Pool().QueryRow(ctx, `SELECT 1`).Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE t (x int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	rows := func() int {
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The current function's own failure: it alone is rolled back.
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	step(tx.Savepoint(ctx))
	step(tx.(execer).Exec(ctx, `INSERT INTO t VALUES (1)`))
	step(tx.ReleaseSavepoint(ctx))
	step(tx.Savepoint(ctx))
	step(tx.(execer).Exec(ctx, `INSERT INTO t VALUES (1)`)) // a duplicate: fails when sent
	if _, err := tx.StreamByID(ctx, 1); err == nil || err == driver.ErrNoStream {
		t.Fatalf("read after a failing statement of the same function: %v, want its error", err)
	}
	step(tx.RollbackToSavepoint(ctx))
	step(tx.ReleaseSavepoint(ctx))
	step(tx.Savepoint(ctx))
	step(tx.(execer).Exec(ctx, `INSERT INTO t VALUES (2)`))
	step(tx.ReleaseSavepoint(ctx))
	step(tx.Commit(ctx))
	if n := rows(); n != 2 {
		t.Fatalf("after one function failed: %d rows, want the other two functions' 2", n)
	}

	// An earlier function's failure surfacing in a later function: the whole group is refused.
	tx2, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(ctx) }()
	tx = tx2
	step(tx.Savepoint(ctx))
	step(tx.(execer).Exec(ctx, `INSERT INTO t VALUES (3)`))
	step(tx.ReleaseSavepoint(ctx))
	step(tx.Savepoint(ctx))
	step(tx.(execer).Exec(ctx, `INSERT INTO t VALUES (1)`)) // fails, queued in this function
	step(tx.ReleaseSavepoint(ctx))                          // ... whose end the store counts as success
	step(tx.Savepoint(ctx))
	if _, err := tx.StreamByID(ctx, 1); err == nil || err == driver.ErrNoStream {
		t.Fatalf("read after an earlier function's statement failed: %v, want an error", err)
	}
	if err := tx.RollbackToSavepoint(ctx); err == nil {
		t.Fatal("rollback to the savepoint succeeded after an earlier function lost its write")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit succeeded after an earlier function lost its write")
	}
	_ = tx.Rollback(ctx)
	if n := rows(); n != 2 {
		t.Fatalf("after a refused group: %d rows, want 2 (nothing of the group)", n)
	}
}
