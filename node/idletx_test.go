package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/node"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// TestANodesTransactionIdlePastItsLeaseIsEndedByTheDatabase: a node on PostgreSQL whose
// transaction sits idle longer than its processor lease (a node frozen in the middle of a write)
// has it ended by the database, so the streams' locks it held are free for the node that takes its
// leases over once they ran out, not only when the frozen node wakes.
func TestANodesTransactionIdlePastItsLeaseIsEndedByTheDatabase(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	n, err := node.Start(t.Context(), node.Config{DB: pgtest.URL(t), Addr: "127.0.0.1:0", Logger: quiet,
		Host:     host.Config{LeaseTTL: ttl},
		Register: func(context.Context, *host.Host) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	pool := n.Store().Driver().(*pgdriver.Driver).Pool()
	ctx := t.Context()
	var timeout string
	if err := pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout != "1500ms" {
		t.Errorf("idle_in_transaction_session_timeout = %s; want the lease, 1500ms", timeout)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The database's own timer, not the test's, ends the session: wait until it is gone.
	if !wait.Every(20*time.Second, 50*time.Millisecond, func() bool {
		var alive bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)
		return err == nil && !alive
	}) {
		t.Fatalf("the idle transaction's session (pid %d) still lives %v later; want it ended after the lease", pid, time.Since(began))
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("the ended transaction still answers")
	}
}
