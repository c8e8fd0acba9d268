package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/jackc/pgx/v5"
)

// promotionBound is how soon after the standby's promotion the nodes must acknowledge appends
// again (docs/reliability.md): a node's pool notices the dead primary on its next statement and
// the multi-host URL's target_session_attrs=read-write finds the promoted standby.
const promotionBound = 10 * time.Second

// TestHistoryStaysLinearizableWhenThePrimaryFailsOverToASynchronousStandby runs two nodes on a
// primary with a synchronous streaming standby, reached through a multi-host URL. Under load the
// primary dies (pg_ctl stop -m immediate) and the standby is promoted; the checker judges the
// whole history, so an append acknowledged by the old primary and missing after the promotion,
// or one applied twice by a retried producer, fails the test.
func TestHistoryStaysLinearizableWhenThePrimaryFailsOverToASynchronousStandby(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	db := pgtest.MultiHostURL(primary, standby)
	a, b := startNode(t, db), startNode(t, db)
	l := startLoad(t, a.URL(), b.URL())
	l.progress("appends before the failover", 30)

	before := l.acknowledged()
	primary.Stop("immediate")
	standby.Promote()
	promoted := time.Now()
	l.progress("appends after the promotion", 30)
	t.Logf("nodes acknowledged appends again %v after the promotion", time.Since(promoted).Round(time.Millisecond))
	if took := time.Since(promoted); took > promotionBound+5*time.Second {
		// progress waited for 30 more acknowledgements; the first came sooner. The bound is
		// loose by the time those 30 take on a loaded machine.
		t.Errorf("the nodes took %v after the promotion to acknowledge 30 appends (bound %v)", took, promotionBound)
	}
	r := l.finish()

	// Positive control: the appends after the failover went to the promoted standby, which holds
	// at least every acknowledged append, and the old primary is gone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		t.Fatal(err)
	}
	if inRecovery {
		t.Fatal("positive control: the standby is still in recovery after pg_ctl promote")
	}
	if pc, err := pgx.Connect(ctx, primary.URL()); err == nil {
		pc.Close(context.Background())
		t.Fatal("positive control: the old primary still answers after pg_ctl stop")
	}
	if r.Counts.Acknowledged <= before {
		t.Errorf("positive control: no append was acknowledged after the failover (%d before, %d in all)", before, r.Counts.Acknowledged)
	}
}
