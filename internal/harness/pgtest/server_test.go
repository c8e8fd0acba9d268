package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestOwnServerKeepsCommittedRowsThroughRestartsAndAKill checks the test helper itself: a
// committed row survives pg_ctl restart -m fast, -m immediate and a SIGKILL of every server
// process, and the server answers on its own port after each.
func TestOwnServerKeepsCommittedRowsThroughRestartsAndAKill(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func(q string) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatalf("connect: %v\nserver log:\n%s", err, srv.Log())
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(`CREATE TABLE t (x int)`)
	steps := []struct {
		name string
		do   func()
	}{
		{"restart -m fast", func() { srv.Restart("fast") }},
		{"restart -m immediate", func() { srv.Restart("immediate") }},
		{"SIGKILL", func() { srv.Kill(); srv.Start() }},
	}
	for i, st := range steps {
		if n := exec(`INSERT INTO t VALUES (1)`); n != i+1 {
			t.Fatalf("before %s: %d rows, want %d", st.name, n, i+1)
		}
		st.do()
		if n := exec(`SELECT 1`); n != i+1 {
			t.Fatalf("after %s: %d rows, want %d", st.name, n, i+1)
		}
	}
}
