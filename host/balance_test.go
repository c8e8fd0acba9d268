package host_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/jackc/pgx/v5"
)

// liveOwners counts the live processor leases per holder.
func liveOwners(ctx context.Context, t *testing.T, db string) map[string]int {
	t.Helper()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT holder, count(*) FROM leases
		WHERE key LIKE 'processor%' AND expires_at > clock_timestamp() GROUP BY holder`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var h string
		var n int
		if err := rows.Scan(&h, &n); err != nil {
			t.Fatal(err)
		}
		out[h] = n
	}
	return out
}

// TestPatternProcessorsSpreadOverTheNodesAndAJoiningNodeTakesItsShare: three nodes, 300 streams
// under one pattern, one event each through the balancer. Once settled, every stream's processor
// runs on exactly one node and no node runs more than 1.5× its fair share; a fourth node that
// joins takes its share from the running nodes, none of which restarts.
func TestPatternProcessorsSpreadOverTheNodesAndAJoiningNodeTakesItsShare(t *testing.T) {
	db := pgtest.URL(t)
	nodes := startNodes(t, db, 3, 2*time.Second)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const streams = 300
	for i := range streams {
		u := fmt.Sprintf("http://lb/v1/stream/counters/b%03d", i)
		preq, _ := http.NewRequestWithContext(ctx, http.MethodPut, u, nil)
		preq.Header.Set("Content-Type", "application/json")
		presp, err := lb.Do(preq)
		if err != nil {
			t.Fatal(err)
		}
		presp.Body.Close()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader([]byte(`{"type":"ticked","payload":{"by":1,"n":0}}`)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := lb.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d", u, resp.StatusCode)
		}
	}
	settled := func(want int) map[string]int {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		var owners map[string]int
		for {
			owners = liveOwners(ctx, t, db)
			total, most := 0, 0
			for _, n := range owners {
				total += n
				most = max(most, n)
			}
			fair := float64(streams) / float64(want)
			if total == streams && len(owners) == want && float64(most) <= 1.5*fair {
				return owners
			}
			if time.Now().After(deadline) {
				t.Fatalf("not settled within a minute on %d nodes: %v (total %d of %d, fair share %.0f)\n%s", want, owners, total, streams, fair, allLogs(nodes))
			}
			time.Sleep(200 * time.Millisecond) // polling other processes' leases
		}
	}
	t.Logf("three nodes: %v", settled(3))
	joiner := &node{t: t, bin: nodes[0].bin, db: db, addr: freeAddr(t), ttl: 2 * time.Second, logs: &strings.Builder{}, name: "n3"}
	joiner.start()
	t.Cleanup(joiner.kill)
	t.Logf("four nodes: %v", settled(4))
	for i, nd := range nodes {
		nd.mu.Lock()
		done := nd.done
		nd.mu.Unlock()
		select {
		case <-done:
			t.Fatalf("node %d exited while the fourth joined", i)
		default:
		}
	}
}
