package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/jackc/pgx/v5"
)

// TestLiveStateSSEFollowsTheProcessorFromEveryNode: two node processes on one database; an SSE
// reader of the counter's live state on each node (so at least one reader is on a node that does
// not run the processor, and receives the deltas as ephemerals from the other node) follows seed
// then deltas, applying each delta to the state at its from revision, to the fold of every tick.
func TestLiveStateSSEFollowsTheProcessorFromEveryNode(t *testing.T) {
	db := pgtest.URL(t)
	nodes := startNodes(t, db, 2, 2*time.Second, "--advertise")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const path = "/counters/live"
	post := func(base string, n int) {
		t.Helper()
		body := fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, n)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/stream"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("append %d: status %d", n, resp.StatusCode)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, nodes[0].url()+"/v1/stream"+path, nil)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	post(nodes[0].url(), 0) // the processor opens on one of the nodes
	// The readers seed once the processor runs where it stays: on the node both members prefer.
	// Before that a hand-over can still move it (the first node up may take it before it sees
	// the second), and the new owner's deltas start a chain the readers re-seed from.
	awaitPreferredOwner(ctx, t, db, path, "counter", nodes)

	type follower struct {
		ticks, deltas int
		err           error
	}
	const ticks = 6
	results := make([]chan follower, len(nodes))
	seeded := make(chan struct{}, len(nodes))
	for i, nd := range nodes {
		results[i] = make(chan follower, 1)
		go func() {
			var f follower
			defer func() { results[i] <- f }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nd.url()+"/v1/processor/counter"+path+"?live=sse", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				f.err = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				f.err = fmt.Errorf("live SSE status %d", resp.StatusCode)
				return
			}
			var held json.RawMessage
			var rev int64
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var ev string
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "event: "); ok {
					ev = v
					continue
				}
				data, ok := strings.CutPrefix(line, "data:")
				if !ok {
					continue
				}
				switch ev {
				case "seed":
					var s struct {
						Rev   int64           `json:"rev"`
						State json.RawMessage `json:"state"`
					}
					if f.err = json.Unmarshal([]byte(data), &s); f.err != nil {
						return
					}
					if held == nil {
						seeded <- struct{}{}
					}
					held, rev = s.State, s.Rev
				case "delta":
					var d struct {
						From, To int64
						Patch    json.RawMessage
					}
					if f.err = json.Unmarshal([]byte(data), &d); f.err != nil {
						return
					}
					if d.From != rev {
						f.err = fmt.Errorf("delta from %d while holding rev %d", d.From, rev)
						return
					}
					if held, f.err = foldstream.ApplyPatch(held, d.Patch); f.err != nil {
						return
					}
					rev = d.To
					f.deltas++
				}
				var st struct {
					Ticks int `json:"ticks"`
				}
				_ = json.Unmarshal(held, &st)
				if f.ticks = st.Ticks; f.ticks == ticks {
					return
				}
			}
			f.err = fmt.Errorf("stream ended: %v", sc.Err())
		}()
	}
	for range nodes {
		select {
		case <-seeded:
		case <-ctx.Done():
			t.Fatal("no seed")
		}
	}
	for n := 1; n < ticks; n++ {
		post(nodes[n%len(nodes)].url(), n)
	}
	for i := range nodes {
		select {
		case f := <-results[i]:
			if f.err != nil || f.ticks != ticks || f.deltas == 0 {
				t.Errorf("reader on node %d: %d ticks after %d deltas (%v), want %d ticks by deltas\n%s", i, f.ticks, f.deltas, f.err, ticks, allLogs(nodes))
			}
		case <-ctx.Done():
			t.Fatalf("reader on node %d did not reach %d ticks", i, ticks)
		}
	}
}

// awaitPreferredOwner waits until every node's node lease is live and the lease of processor
// slug on path is live and held by the node the members prefer for it (host.PreferredNode), so
// no hand-over follows while the cluster stays as it is.
func awaitPreferredOwner(ctx context.Context, t *testing.T, db, path, slug string, nodes []*node) {
	t.Helper()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var members []string
	var holder string
	// Polling other processes' leases in the database.
	if wait.Every(30*time.Second, 50*time.Millisecond, func() bool {
		members, holder = members[:0], ""
		rows, err := conn.Query(ctx, `SELECT key, holder FROM leases WHERE expires_at > clock_timestamp()
			AND (key LIKE 'node%' OR key = $1)`, "processor\x1f"+path+"\x1f"+slug)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var key, h string
			if err := rows.Scan(&key, &h); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(key, "node") {
				members = append(members, h)
			} else {
				holder = h
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return len(members) == len(nodes) && holder != "" && holder == host.PreferredNode(members, path, slug)
	}) {
		return
	}
	t.Fatalf("the processor did not settle on its preferred node: holder %q, members %q\n%s", holder, members, allLogs(nodes))
}
