package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
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

// TestPatternProcessorsSpreadOverNodesStartedTogetherAndAJoiningNodeTakesItsShare: 300 streams
// under one pattern hold work (a node wrote one event to each and stopped); three nodes start at
// the same moment while producers keep writing to every stream through all of them. Within a
// minute every stream's processor runs on exactly one node and every node runs between half and
// 1.5× its fair share — the first node up does not keep the streams it took before it saw the
// others; a fourth node that joins takes its share from the running nodes, none of which restarts.
func TestPatternProcessorsSpreadOverNodesStartedTogetherAndAJoiningNodeTakesItsShare(t *testing.T) {
	db := pgtest.URL(t)
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const streams = 300
	streamURL := func(i int) string { return fmt.Sprintf("http://lb/v1/stream/counters/b%03d", i) }
	post := func(hc *http.Client, i int) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, streamURL(i), bytes.NewReader([]byte(`{"type":"ticked","payload":{"by":1,"n":0}}`)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s: %d", streamURL(i), resp.StatusCode)
		}
		return nil
	}
	seed := startNodes(t, db, 1, ttl)
	seedLB := lbClient(seed)
	for i := range streams {
		preq, _ := http.NewRequestWithContext(ctx, http.MethodPut, streamURL(i), nil)
		preq.Header.Set("Content-Type", "application/json")
		presp, err := seedLB.Do(preq)
		if err != nil {
			t.Fatal(err)
		}
		presp.Body.Close()
		if err := post(seedLB, i); err != nil {
			t.Fatal(err)
		}
	}
	seed[0].term() // its leases are released for a takeover

	bin := buildNode(t)
	nodes := make([]*node, 3)
	readies := make([]chan struct{}, len(nodes))
	for i := range nodes {
		nodes[i] = &node{t: t, bin: bin, db: db, addr: freeAddr(t), ttl: ttl, logs: &strings.Builder{}, name: fmt.Sprintf("n%d", i)}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.kill()
		}
	})
	for i, nd := range nodes {
		readies[i] = nd.launch() // all at once
	}
	for i, nd := range nodes {
		nd.await(readies[i])
	}
	all := append([]*node(nil), nodes...)
	lb := lbClient(nodes)
	// Producers: every stream gets an event every few seconds, through every node in turn.
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	var perr atomic.Value
	for p := range 2 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			failed := 0 // transport failures in a row
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				err := post(lb, (p+2*k)%streams)
				var uerr *url.Error
				if errors.As(err, &uerr) && failed < 50 {
					// A connection a node closed as the request went out (EOF, reset): the
					// producers only keep the streams busy, so the next event goes on; a node that
					// keeps failing them still fails the test.
					failed++
					continue
				}
				failed = 0
				if err != nil && ctx.Err() == nil {
					perr.Store(err)
					return
				}
			}
		}()
	}
	defer func() {
		close(stop)
		pwg.Wait()
	}()
	settled := func(want int) map[string]int {
		t.Helper()
		start := time.Now()
		var owners map[string]int
		var total, most, least int
		var fair float64
		// Polling other processes' leases.
		if wait.Every(time.Minute, 200*time.Millisecond, func() bool {
			if err, _ := perr.Load().(error); err != nil {
				t.Fatalf("producer: %v", err)
			}
			owners = liveOwners(ctx, t, db)
			total, most, least = 0, 0, streams
			for _, n := range owners {
				total += n
				most, least = max(most, n), min(least, n)
			}
			fair = float64(streams) / float64(want)
			return total == streams && len(owners) == want && float64(most) <= 1.5*fair && float64(least) >= fair/2
		}) {
			t.Logf("settled on %d nodes after %v: %v", want, time.Since(start).Round(time.Millisecond), owners)
			return owners
		}
		t.Fatalf("not settled within a minute on %d nodes: %v (total %d of %d, fair share %.0f)\n%s", want, owners, total, streams, fair, allLogs(all))
		return nil
	}
	settled(3)
	joiner := &node{t: t, bin: bin, db: db, addr: freeAddr(t), ttl: ttl, logs: &strings.Builder{}, name: "n3"}
	joiner.start()
	t.Cleanup(joiner.kill)
	all = append(all, joiner)
	settled(4)
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
