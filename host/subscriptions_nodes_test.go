package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// TestSubscriptionDeliveryMovesWhenItsNodeProcessIsKilled: two node processes on one database
// deliver a subscription's wakes from one of them, the holder of the delivery lease, whichever node
// took the append; SIGKILLed, the holder leaves the lease to run out, and the other process
// takes delivery over and delivers the next wake.
func TestSubscriptionDeliveryMovesWhenItsNodeProcessIsKilled(t *testing.T) {
	db := pgtest.URL(t)
	type delivery struct{ wakeID, raw string }
	got := make(chan delivery, 16)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var p struct {
			WakeID string `json:"wake_id"`
		}
		_ = json.Unmarshal(b, &p)
		got <- delivery{p.WakeID, string(b)}
		_, _ = io.WriteString(w, `{"done":true}`)
	}))
	defer rc.Close()
	const ttl = time.Second
	nodes := startNodes(t, db, 2, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(base, path, body string, want int) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/stream/"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("PUT %s: %d %s", path, res.StatusCode, b)
		}
	}
	next := func() delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(20 * time.Second):
			for _, n := range nodes {
				n.kill()
				t.Logf("node %s log:\n%s", n.incarnation(), n.logText())
			}
			t.Fatal("no webhook delivery within 20 s")
			return delivery{}
		}
	}
	put(nodes[0].url(), "__ds/subscriptions/moving", `{"type":"webhook","pattern":"jobs/*","webhook":{"url":"`+rc.URL+`/hook"}}`, http.StatusCreated)
	put(nodes[1].url(), "jobs/1", `{"n":1}`, http.StatusCreated)
	first := next()
	// The holder records the done answer (the ack) before it is killed: a wake whose attempt
	// a killed node left unrecorded is sent again only after the attempt guard (30 s).
	acked := func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nodes[1].url()+"/v1/stream/__ds/subscriptions/moving", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var s struct {
			Streams []struct {
				Path        string `json:"path"`
				AckedOffset string `json:"acked_offset"`
			} `json:"streams"`
		}
		_ = json.NewDecoder(res.Body).Decode(&s)
		return len(s.Streams) == 1 && s.Streams[0].AckedOffset == "0000000000000000_0000000000000001"
	}
	if !wait.Every(10*time.Second, 20*time.Millisecond, acked) { // polling another process's state
		t.Fatal("the first wake was not acked within 10 s")
	}
	var holder string
	if err := pgQueryRow(ctx, db, `SELECT holder FROM leases WHERE key = '__ds/subscriptions'`, &holder); err != nil {
		t.Fatal(err)
	}
	var dead, alive int
	switch holder {
	case nodes[0].incarnation():
		dead, alive = 0, 1
	case nodes[1].incarnation():
		dead, alive = 1, 0
	default:
		t.Fatalf("delivery lease held by %q, neither node", holder)
	}
	nodes[dead].kill()
	put(nodes[alive].url(), "jobs/2", `{"n":2}`, http.StatusCreated)
	second := next()
	if second.wakeID == first.wakeID || !strings.Contains(second.raw, `"jobs/2"`) {
		t.Fatalf("after the kill: %s, want a new wake for jobs/2", second.raw)
	}
	if err := pgQueryRow(ctx, db, `SELECT holder FROM leases WHERE key = '__ds/subscriptions'`, &holder); err != nil {
		t.Fatal(err)
	}
	if holder != nodes[alive].incarnation() {
		t.Fatalf("delivery lease held by %q after the kill, want %q", holder, nodes[alive].incarnation())
	}
}
