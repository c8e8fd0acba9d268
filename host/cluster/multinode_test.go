package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/pgtest"
)

const counterStream = "/counters/a"

// message is the part of a stored message the checks look at.
type message struct {
	Type    string `json:"type"`
	Payload struct {
		By int   `json:"by"`
		N  int   `json:"n"`
		Of int64 `json:"of"`
	} `json:"payload"`
}

// lbClient returns an HTTP client spreading requests over the nodes.
func lbClient(nodes []*node) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, ResponseHeaderTimeout: 20 * time.Second}
	return &http.Client{Transport: &balancer{nodes: nodes, base: tr}}
}

func streamURL(base string) string { return base + "/v1/stream" + counterStream }

// readAll reads the whole stream through hc.
func readAll(ctx context.Context, t *testing.T, hc *http.Client, base string) []json.RawMessage {
	t.Helper()
	s, err := client.NewStream(streamURL(base), client.Options{HTTPClient: hc,
		Retry: client.RetryPolicy{MaxAttempts: 100, MaxDelay: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for m, err := range s.Messages(ctx, client.ReadOptions{}) {
		if err != nil {
			t.Fatalf("read the stream: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// liveReader follows the stream on one node with long-polls, resuming from its last offset after
// the node dies, and collects every message in order.
type liveReader struct {
	mu   sync.Mutex
	msgs []json.RawMessage
}

func (r *liveReader) run(ctx context.Context, nd *node) {
	hc := &http.Client{Timeout: 30 * time.Second}
	offset := client.OffsetStart
	for ctx.Err() == nil {
		s, _ := client.NewStream(streamURL(nd.url()), client.Options{HTTPClient: hc,
			Retry: client.RetryPolicy{MaxAttempts: 3, MaxDelay: 200 * time.Millisecond}})
		for c, err := range s.Read(ctx, client.ReadOptions{Offset: offset, Live: client.LiveLongPoll}) {
			if err != nil {
				break
			}
			if !c.Empty() {
				msgs, err := client.SplitJSON(c.Data)
				if err != nil {
					break
				}
				r.mu.Lock()
				r.msgs = append(r.msgs, msgs...)
				r.mu.Unlock()
			}
			offset = c.NextOffset
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // the node is restarting
		}
	}
}

func (r *liveReader) snapshot() []json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]json.RawMessage(nil), r.msgs...)
}

// TestThreeNodesKilledInTurnLoseNothingAndRunEachEffectOnce is the cluster's main guarantee:
// three nodes on one database; idempotent producers write through all three (a round-robin
// balancer) while one node at a time is SIGKILLed and restarted; long-poll readers follow on every
// node. At the end every message is in the log exactly once and in its producer's order, every
// reader saw the log exactly, and the counter processor — which moved between nodes with every
// kill of its owner — folded every tick once and emitted each tick's effect once.
func TestThreeNodesKilledInTurnLoseNothingAndRunEachEffectOnce(t *testing.T) {
	db := pgtest.URL(t)
	const ttl = time.Second
	nodes := startNodes(t, db, 3, ttl)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, streamURL(nodes[0].url()), nil)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	readers := make([]*liveReader, len(nodes))
	rctx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var rwg sync.WaitGroup
	for i, nd := range nodes {
		readers[i] = &liveReader{}
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			readers[i].run(rctx, nd)
		}()
	}

	// Producers: each writes its ticks in order through the balancer until the kills are over.
	const producers = 3
	var pwg sync.WaitGroup
	stopProducing := make(chan struct{})
	sent := make([]int, producers)
	perrs := make([]error, producers)
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			s, err := client.NewStream(streamURL("http://lb"), client.Options{HTTPClient: lb,
				Retry: client.RetryPolicy{MaxAttempts: 1000, InitialDelay: 20 * time.Millisecond, MaxDelay: 300 * time.Millisecond}})
			if err != nil {
				perrs[p] = err
				return
			}
			s.SetContentType("application/json")
			pr, err := client.NewIdempotentProducer(s, fmt.Sprintf("producer-%d", p), client.ProducerOptions{
				Linger: 2 * time.Millisecond, MaxInFlight: 2, RequestTimeout: 5 * time.Second})
			if err != nil {
				perrs[p] = err
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stopProducing:
					sent[p] = i
					perrs[p] = pr.Close(ctx)
					return
				case <-time.After(10 * time.Millisecond):
				}
				if err := pr.AppendJSON(map[string]any{"type": "ticked", "payload": map[string]any{"by": 1, "n": p*1_000_000 + i}}); err != nil {
					sent[p] = i
					perrs[p] = err
					return
				}
			}
		}()
	}

	// Kill one node at a time, in turn, and restart it.
	const kills = 10
	for k := range kills {
		select {
		case <-time.After(700 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("timed out while killing nodes")
		}
		nd := nodes[k%len(nodes)]
		nd.kill()
		nd.start()
	}
	close(stopProducing)
	pwg.Wait()
	total := 0
	for p := range producers {
		if perrs[p] != nil {
			t.Fatalf("producer %d: %v", p, perrs[p])
		}
		total += sent[p]
	}
	if total < 100 {
		t.Fatalf("only %d messages were acknowledged; the test needs load", total)
	}

	// The log: every producer's ticks exactly once, in order.
	log := readAll(ctx, t, lb, "http://lb")
	next := make([]int, producers)
	ticks := map[int64]bool{} // offsets of ticks, by position in the log (1-based)
	effects := map[int64]int{}
	var tickOffsets []int64
	for i, raw := range log {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		switch m.Type {
		case "ticked":
			p, n := m.Payload.N/1_000_000, m.Payload.N%1_000_000
			if n != next[p] {
				t.Fatalf("producer %d: message %d at log position %d, want %d (lost, duplicated or reordered)", p, n, i+1, next[p])
			}
			next[p]++
			ticks[int64(i+1)] = true
			tickOffsets = append(tickOffsets, int64(i+1))
		case "effect":
			effects[m.Payload.Of]++
		}
	}
	for p := range producers {
		if next[p] != sent[p] {
			t.Fatalf("producer %d: %d messages in the log, %d acknowledged", p, next[p], sent[p])
		}
	}

	// The processor: wait (through any node) until it processed the whole log, then compare
	// with the fold.
	var snap struct {
		Offset int64 `json:"offset"`
		State  struct {
			Ticks  int `json:"ticks"`
			Events int `json:"events"`
		} `json:"state"`
	}
	url := fmt.Sprintf("http://lb/v1/processor/counter%s?waitUntilProcessed=%d&timeout=30s", counterStream, len(log))
	if err := getJSON(ctx, lb, url, &snap); err != nil {
		t.Fatalf("processor snapshot: %v\nlogs:\n%s", err, allLogs(nodes))
	}
	if snap.State.Events != total || snap.State.Ticks != total {
		t.Fatalf("processor state: %+v through %d, want %d ticks (the fold of the log)", snap.State, snap.Offset, total)
	}
	// Effects are appended after their tick; wait for the last ones to land, then count.
	deadline := time.Now().Add(30 * time.Second)
	for {
		effects = map[int64]int{}
		for _, raw := range readAll(ctx, t, lb, "http://lb") {
			var m message
			if json.Unmarshal(raw, &m) == nil && m.Type == "effect" {
				effects[m.Payload.Of]++
			}
		}
		if len(effects) >= len(tickOffsets) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // effects land asynchronously, after their ticks
	}
	_ = ticks
	for off, n := range effects {
		if n != 1 {
			t.Fatalf("effect of the tick at %d landed %d times, want once", off, n)
		}
	}
	if len(effects) != len(tickOffsets) {
		t.Fatalf("%d effects for %d ticks", len(effects), len(tickOffsets))
	}

	// Readers on every node saw the log exactly (they may still be catching up).
	final := readAll(ctx, t, lb, "http://lb")
	for i, r := range readers {
		deadline := time.Now().Add(30 * time.Second)
		for len(r.snapshot()) < len(final) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the reader long-polls another process
		}
		got := r.snapshot()
		if len(got) < len(final) {
			t.Fatalf("reader on node %d saw %d messages, the log has %d", i, len(got), len(final))
		}
		for j := range final {
			if string(got[j]) != string(final[j]) {
				t.Fatalf("reader on node %d: message %d differs: %s vs %s", i, j, got[j], final[j])
			}
		}
	}
	stopReaders()
	rwg.Wait()
	t.Logf("%d ticks through %d kills; log of %d messages", total, kills, len(final))
}

// TestPausedOwnerLosesItsProcessorAndCommitsNothingAfterResuming: SIGSTOP the node running the
// counter; another node takes the lease over and keeps processing; after SIGCONT the paused
// node's engine writes no checkpoint (fenced) and stops.
func TestPausedOwnerLosesItsProcessorAndCommitsNothingAfterResuming(t *testing.T) {
	db := pgtest.URL(t)
	const ttl = time.Second
	nodes := startNodes(t, db, 2, ttl)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	post := func(n int) {
		t.Helper()
		body := fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, n)
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, streamURL("http://lb"), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := lb.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					return
				}
			}
			if ctx.Err() != nil {
				t.Fatal("post timed out")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	owner := func() (string, int64) {
		var addr string
		var gen int64
		for ctx.Err() == nil {
			err := pgQueryRow(ctx, db, `SELECT holder_addr, generation FROM leases WHERE expires_at > clock_timestamp()`, &addr, &gen)
			if err == nil {
				return addr, gen
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("no node holds the processor's lease")
		return "", 0
	}
	for i := range 5 {
		post(i)
	}
	addr, gen := owner()
	var paused, other *node
	for _, nd := range nodes {
		if nd.url() == addr {
			paused = nd
		} else {
			other = nd
		}
	}
	if paused == nil {
		t.Fatalf("owner %s is none of the nodes", addr)
	}
	paused.signal(syscall.SIGSTOP)
	start := time.Now()
	var newAddr string
	var newGen int64
	for {
		newAddr, newGen = owner()
		if newGen > gen {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover after %v (lease %v)", time.Since(start), ttl)
	if newAddr != other.url() {
		t.Fatalf("new owner %s, want %s", newAddr, other.url())
	}
	lb.Transport.(*balancer).nodes = []*node{other}
	for i := 5; i < 10; i++ {
		post(i)
	}
	var before int64
	waitCP := func(min int64) int64 {
		var off int64
		for ctx.Err() == nil {
			if err := pgQueryRow(ctx, db, `SELECT reduced_through_offset FROM reduce_checkpoints WHERE slug = 'counter'`, &off); err == nil && off >= min {
				return off
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("checkpoint never advanced")
		return 0
	}
	before = waitCP(10)
	// Resume the stale node: whatever its engine still does must not move the checkpoint.
	paused.signal(syscall.SIGCONT)
	time.Sleep(3 * ttl) // give the stale engine every chance to write (there is nothing to wait on)
	var after int64
	var gotGen int64
	if err := pgQueryRow(ctx, db, `SELECT reduced_through_offset FROM reduce_checkpoints WHERE slug = 'counter'`, &after); err != nil {
		t.Fatal(err)
	}
	if err := pgQueryRow(ctx, db, `SELECT generation FROM leases`, &gotGen); err != nil {
		t.Fatal(err)
	}
	if gotGen != newGen {
		t.Fatalf("lease generation moved to %d after the stale node resumed, want %d", gotGen, newGen)
	}
	if after < before {
		t.Fatalf("checkpoint went back from %d to %d: the stale engine wrote", before, after)
	}
	// The resumed node noticed and stopped its engine (it may take the lease again later only
	// after the other node gives it up, which it does not here).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(paused.logText(), "stopping the processor") {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed node never stopped its stale engine:\n%s", paused.logText())
		}
		paused.signal(syscall.SIGTERM) // flush its logs: the stderr pipe is read at exit
		time.Sleep(100 * time.Millisecond)
	}
	var snap struct {
		State struct {
			Events int `json:"events"`
		} `json:"state"`
	}
	if err := getJSON(ctx, lb, "http://lb/v1/processor/counter"+counterStream, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.State.Events != 10 {
		t.Fatalf("processor folded %d ticks, want 10", snap.State.Events)
	}
}

func allLogs(nodes []*node) string {
	var b strings.Builder
	for i, nd := range nodes {
		fmt.Fprintf(&b, "--- node %d (%s)\n%s\n", i, nd.addr, nd.logText())
	}
	return b.String()
}

var _ = pgtest.EnvVar
