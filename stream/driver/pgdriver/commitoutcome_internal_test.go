package pgdriver

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// TestACommitTheDatabaseDoesNotConfirmFailsWithOutcomeUnknownWithinTheWriteTimeout sends a write
// transaction's COMMIT into a black-holed network: Commit must return within the write timeout
// with COMMIT_OUTCOME_UNKNOWN (not UNAVAILABLE: the COMMIT went out, it may have been written),
// and the connection must be closed, never handed to the next transaction.
func TestACommitTheDatabaseDoesNotConfirmFailsWithOutcomeUnknownWithinTheWriteTimeout(t *testing.T) {
	t.Parallel()
	px, via := pgtest.NewProxy(t, pgtest.URL(t))
	ctx := context.Background()
	// One connection, so the transaction under test runs where a COMMIT ran before: pgx has it
	// prepared, and sends it with no round trip of its own first (a failure there would send no
	// COMMIT, a known outcome).
	d, err := Open(ctx, Config{URL: via + "&" + WriteTimeoutParam + "=500ms", MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if d.cfg.WriteTimeout != 500*time.Millisecond {
		t.Fatalf("write_timeout in the URL gave WriteTimeout %v, want 500ms", d.cfg.WriteTimeout)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := d.Writer(ctx)
	warm, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.(*writeTx).Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if err := warm.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dtx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wtx := dtx.(*writeTx)
	t.Cleanup(func() { px.Resume(); _ = wtx.Rollback(ctx) }) // before the driver closes, should the test fail
	if err := wtx.Exec(ctx, `CREATE TABLE outcome (x int)`); err != nil {
		t.Fatal(err)
	}
	var one int
	if err := wtx.p.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil { // BEGIN and CREATE go out
		t.Fatal(err)
	}
	conn := wtx.p.conn.Conn().PgConn()
	px.Stall()
	start := time.Now()
	err = dtx.Commit(ctx)
	took := time.Since(start)
	if foldtype.CodeOf(err) != foldtype.CodeCommitOutcomeUnknown {
		t.Fatalf("commit into a dark network: %v (code %q), want COMMIT_OUTCOME_UNKNOWN", err, foldtype.CodeOf(err))
	}
	if took > 5*time.Second {
		t.Fatalf("commit into a dark network returned after %v, want about the write timeout (500ms)", took)
	}
	if !conn.IsClosed() {
		t.Fatal("the connection whose COMMIT went unanswered is still open")
	}
	_ = dtx.Rollback(ctx)
	px.Resume()
	// The next transaction gets a working connection.
	dtx, err = w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dtx.(*writeTx).p.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatalf("a transaction after the outage: %v", err)
	}
	_ = dtx.Rollback(ctx)
}

// TestWriteTimeoutInTheURLIsTakenOutAndChecked: write_timeout is the driver's, not a PostgreSQL
// setting (the server would refuse the connection), and a value that is not a duration is refused
// with INVALID_CONFIG.
func TestWriteTimeoutInTheURLIsTakenOutAndChecked(t *testing.T) {
	got, d, err := takeWriteTimeout("postgres://u@h1:5432,h2:5432/db?sslmode=disable&write_timeout=3s&target_session_attrs=read-write")
	if err != nil || d != 3*time.Second || got != "postgres://u@h1:5432,h2:5432/db?sslmode=disable&target_session_attrs=read-write" {
		t.Fatalf("takeWriteTimeout = %q, %v, %v", got, d, err)
	}
	if _, _, err := takeWriteTimeout("postgres://u@h/db?write_timeout=soon"); foldtype.CodeOf(err) != foldtype.CodeInvalidConfig {
		t.Fatalf("write_timeout=soon: %v, want INVALID_CONFIG", err)
	}
}
