package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// TestDatabaseRestartedAndKilledUnderLoadLosesNothing restarts the database itself under two
// nodes — pg_ctl restart -m fast, pg_ctl restart -m immediate, and a SIGKILL of every server
// process followed by crash recovery — while idempotent producers write through both nodes, a
// long-poll reader follows on each node and the leased counter processor runs. While the
// database is down the nodes answer 503 with Retry-After (never another 5xx); afterwards nothing
// acknowledged is lost or duplicated, the readers saw the log exactly, and the processor folded
// every tick once and emitted each tick's effect once: the nodes recovered by themselves.
func TestDatabaseRestartedAndKilledUnderLoadLosesNothing(t *testing.T) {
	pg := pgtest.StartServer(t)
	const ttl = time.Second
	nodes := startNodes(t, pg.URL(), 2, ttl)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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

	const producers = 3
	var pwg sync.WaitGroup
	stopProducing := make(chan struct{})
	sent := make([]int, producers)
	perrs := make([]error, producers)
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			s, err := client.NewStream(streamURL("http://lb"), client.Config{HTTPClient: lb,
				Retry: client.RetryPolicy{MaxAttempts: 1000, InitialDelay: 20 * time.Millisecond, MaxDelay: 300 * time.Millisecond}})
			if err != nil {
				perrs[p] = err
				return
			}
			s.SetContentType("application/json")
			pr, err := client.NewIdempotentProducer(s, fmt.Sprintf("producer-%d", p), client.ProducerConfig{
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

	// While the database is down, a node answers every write 503 with Retry-After.
	probeDown := func() {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			preq, _ := http.NewRequestWithContext(ctx, http.MethodPost, streamURL(nodes[1].url()),
				strings.NewReader(`{"type":"probe","payload":{}}`))
			preq.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(preq)
			if err != nil {
				t.Fatalf("probe while the database is down: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				if resp.Header.Get("Retry-After") == "" {
					t.Fatal("503 without Retry-After while the database is down")
				}
				return
			}
			if resp.StatusCode/100 != 2 {
				t.Fatalf("probe while the database is down: %d (code %q), want 503 with Retry-After",
					resp.StatusCode, resp.Header.Get("Foldstream-Error-Code"))
			}
			// 2xx: a probe that reached the database before it went down (retried below).
			if time.Now().After(deadline) {
				t.Fatal("the node kept acknowledging writes with the database down")
			}
		}
	}
	load := func() {
		select {
		case <-time.After(800 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("timed out")
		}
	}
	load()
	pg.Restart("fast")
	load()
	pg.Restart("immediate")
	load()
	pg.Kill()
	probeDown()
	pg.Start()
	load()
	pg.Stop("immediate")
	probeDown()
	pg.Start()
	load()
	close(stopProducing)
	pwg.Wait()
	total := 0
	for p := range producers {
		if perrs[p] != nil {
			t.Fatalf("producer %d: %v\nlogs:\n%s", p, perrs[p], allLogs(nodes))
		}
		total += sent[p]
	}
	if total < 100 {
		t.Fatalf("only %d messages were acknowledged; the test needs load", total)
	}

	// The log: every producer's ticks exactly once, in order (probes are not ticks).
	log := readAll(ctx, t, lb, "http://lb")
	next := make([]int, producers)
	for i, raw := range log {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m.Type == "ticked" {
			p, n := m.Payload.N/1_000_000, m.Payload.N%1_000_000
			if n != next[p] {
				t.Fatalf("producer %d: message %d at log position %d, want %d (lost, duplicated or reordered)", p, n, i+1, next[p])
			}
			next[p]++
		}
	}
	for p := range producers {
		if next[p] != sent[p] {
			t.Fatalf("producer %d: %d messages in the log, %d acknowledged", p, next[p], sent[p])
		}
	}

	// The processor resumed and folded every tick; each tick's effect landed once.
	var snap struct {
		State struct {
			Ticks int `json:"ticks"`
		} `json:"state"`
	}
	url := fmt.Sprintf("http://lb/v1/processor/counter%s?waitUntilProcessed=%d&timeout=30s", counterStream, len(log))
	if err := getJSON(ctx, lb, url, &snap); err != nil {
		t.Fatalf("processor snapshot: %v\nlogs:\n%s", err, allLogs(nodes))
	}
	if snap.State.Ticks != total {
		t.Fatalf("processor folded %d ticks, want %d", snap.State.Ticks, total)
	}
	var final []json.RawMessage
	var effects map[int64]int
	if !wait.Every(30*time.Second, 200*time.Millisecond, func() bool { // effects land asynchronously, after their ticks
		final = readAll(ctx, t, lb, "http://lb")
		effects = map[int64]int{}
		for _, raw := range final {
			var m message
			if json.Unmarshal(raw, &m) == nil && m.Type == "effect" {
				effects[m.Payload.Of]++
			}
		}
		for off, n := range effects {
			if n != 1 {
				t.Fatalf("effect of the tick at %d landed %d times, want once", off, n)
			}
		}
		return len(effects) == total
	}) {
		t.Fatalf("%d effects for %d ticks", len(effects), total)
	}

	// Readers on both nodes resumed and saw the log exactly.
	for i, r := range readers {
		// The reader long-polls another process; the check below judges what it saw by then.
		wait.Every(30*time.Second, 50*time.Millisecond, func() bool { return len(r.snapshot()) >= len(final) })
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
	t.Logf("%d ticks through two restarts, a SIGKILL and an immediate stop of the database; log of %d messages", total, len(final))
}

// TestADatabaseRestartUnderOneNodeRunsNoEffectTwice restarts the database three times (pg_ctl
// restart -m immediate: no shutdown checkpoint, crash recovery) under one node whose counter
// processor runs an external effect for every tick on 20 streams and emits its record. The work in
// flight at each restart ran its effect while the database went away; its record and its
// checkpoint are sent again until the database is back (docs/engine.md#writes-through-a-database-blip),
// so no effect runs twice — nobody else could have taken the lease, and nothing the node did was
// lost — and every acknowledged tick has its effect.
func TestADatabaseRestartUnderOneNodeRunsNoEffectTwice(t *testing.T) {
	const streams = 20
	pg := pgtest.StartServer(t)
	sink := newEffectSink()
	es := httptest.NewServer(sink)
	defer es.Close()
	nodes := startNodes(t, pg.URL(), 1, 2*time.Second, "--effects", es.URL)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	path := func(i int) string { return fmt.Sprintf("/counters/r%02d", i) }
	for i := range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://lb/v1/stream"+path(i), nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := lb.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	tp := &tickProducers{hc: lb, path: path, acked: make([][]time.Time, streams)}
	pctx, stopProducing := context.WithCancel(ctx)
	pdone := tp.run(pctx, 10)
	defer func() { stopProducing(); <-pdone }()

	for r := range 3 {
		from := sink.count()
		waitUntil(t, 60*time.Second, "effects before the restart", func() bool {
			if err := tp.error(); err != nil {
				t.Fatal(err)
			}
			return sink.count() >= from+40
		})
		pg.Restart("immediate")
		t.Logf("restart %d: %d effects before it", r+1, sink.count())
	}
	atEnd := tp.ackedCounts()
	waitUntil(t, 60*time.Second, "a tick on every stream after the last restart", func() bool {
		for i, n := range tp.ackedCounts() {
			if n <= atEnd[i] {
				return false
			}
		}
		return true
	})
	stopProducing()
	<-pdone
	if err := tp.error(); err != nil {
		t.Fatal(err)
	}
	owed := tp.ackedCounts()
	if !wait.Every(60*time.Second, 50*time.Millisecond, func() bool { return sink.coveredAll(path, owed) }) {
		missing := sink.missing(path, owed, 10)
		status := processorStatus(lb, missing)
		nodes[0].kill() // a node's log is read once it exited
		t.Fatalf("acknowledged ticks without their effect: %v\nprocessors:\n%s\nlogs:\n%s", missing, status, allLogs(nodes))
	}
	ran := map[string][]effectRun{}
	total := 0
	for _, r := range sink.runs() {
		ran[r.Key] = append(ran[r.Key], r)
		total++
	}
	for k, rs := range ran {
		if len(rs) > 1 {
			t.Errorf("%s ran %d times: %s", k, len(rs), describeRuns(rs))
		}
	}
	if t.Failed() {
		nodes[0].kill()
		t.Logf("logs:\n%s", allLogs(nodes))
	}
	t.Logf("%d effects of %d ticks through three database restarts", total, len(ran))
}
