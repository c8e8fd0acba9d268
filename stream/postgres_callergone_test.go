package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// TestAPostgresWriteWhoseCallerGoesAwayMidFunctionKeepsItsStatements: on PostgreSQL too, a caller
// that goes away once its function started does not stop the function's statements. A statement
// that needs its answer flushes the pipeline, which carries the statements other writes of the
// group queued before it: cancelled by one caller, that flush failed them all, and the whole group
// was refused (a busy node's producers timing out refused everyone's appends, which then came back
// as retries). The statement after the cancellation runs, and the write commits.
func TestAPostgresWriteWhoseCallerGoesAwayMidFunctionKeepsItsStatements(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openPGStore(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stmtErr error
	err := s.write(ctx, func(tx *tx) error {
		cancel()
		_, stmtErr = tx.db.InsertStream(tx.ctx, driver.Stream{Path: "/after-cancel", ContentType: EventContentType})
		return stmtErr
	})
	if stmtErr != nil {
		t.Fatalf("statement after the caller went away: %v", stmtErr)
	}
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM streams WHERE path = '/after-cancel'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("rows at /after-cancel: %d, want 1", n)
	}
}
