package host_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// handOverBound is what TestAGracefulHandOver… asserts twice, on every move: from SIGTERM until
// every lease the stopped node held is live on the other node, and until the other node's first
// effect on each stream it took over (from the tick's append when that came after the signal). It
// is the project's goal for a graceful hand-over (docs/postgres.md#graceful-hand-over): over within
// a second. What a move waits for is a chain of round trips and group commits — the stopping
// engine's event in progress (its effect, its append's and its checkpoint's group commits), the
// release and its notification, the new owner's settle check (one read with the head), lease, state
// row and checkpoint reads, its wake record's group commit, its catch-up's read and first event. On
// the 2-core machine with the test's busy loops beside other work, every step waits for the
// scheduler: a process gets about a tenth of a core at load 20, and the first effect came max
// 0.5–1.4 s after the signal at load 18–29, 4.3–14 s at load 34–41
// (docs/bench/postgres.md#hand-over-figures), the move's length following the node's share of the
// CPU; at 5.3–6.0 per core (10.6–12 here: the busy loops and another test run beside) the leases
// moved in 0.28–0.36 s and the first effects came at most 0.33 s after the signal. So the second is
// asserted while the load average per core is at most handOverBusyLoad, and handOverBusyBound
// above it.
const handOverBound = time.Second

// handOverBusyLoad is the load average per core up to which handOverBound is asserted: where the
// moves measured took at most a third of it.
const handOverBusyLoad = 7.0

// handOverBusyBound is the bound asserted on a machine busier than handOverBusyLoad: the node's
// shutdown timeout (15 s in testdata/node, after which in-flight work is cut short and the leases
// are released) plus the takeover; at load 34–41 the stopping engines took up to 7.6 s to finish
// their event in progress, their writer committing one group every few seconds.
const handOverBusyBound = 20 * time.Second

// burnCPU starts one busy-looping process per core, the other build beside CI, and stops each by
// its PID when the test ends.
func burnCPU(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU burner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// TestAGracefulHandOverUnderCPULoadMovesEveryLeaseToTheOtherNode holds a SIGTERM's hand-over to
// its bound on a busy machine: two node processes on one PostgreSQL database run the counter on 24 streams while producers append
// ticks through both and a busy loop runs on every core; one node is SIGTERMed. Every lease the
// stopped node held is live on the other node within handOverBound of the signal, every tick has
// its effect, and every counter, read through the remaining node, is the fold of its stream. It
// logs the figures: the leases' move, the stopped node's exit, and the other node's first effect
// on each moved stream (from the signal, or from the tick's append when that came later).
func TestAGracefulHandOverUnderCPULoadMovesEveryLeaseToTheOtherNode(t *testing.T) {
	db := pgtest.URL(t)
	effects := &effectLog{}
	es := httptest.NewServer(effects)
	defer es.Close()
	const ttl = 5 * time.Second // the default lease: a hand-over must not wait for it
	nodes := startNodes(t, db, 2, ttl, "--effects", es.URL, "--debug")
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	const streams = 24
	path := func(i int) string { return fmt.Sprintf("/counters/h%02d", i) }
	url := func(base string, i int) string { return base + "/v1/stream" + path(i) }
	for i := range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url("http://lb", i), nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := lb.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A long-poll follower of every stream on each node, as the streams' readers would be: the
	// hand-over is measured apart from a processor's waking on an append over HTTP, which its own
	// tests hold (host/httpreaction_test.go) whether or not anybody follows the stream.
	fctx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	for _, nd := range nodes {
		for i := range streams {
			go follow(fctx, url(nd.url(), i))
		}
	}
	burnCPU(t)
	start := time.Now()

	// Producers: goroutine p writes to the streams i with i%producers == p, round robin, a tick
	// every 100 ms (about 20 ticks/s in all, each with its effect's append: what one node keeps up
	// with beside the burners, so the figure is the hand-over's, not a backlog's), each stream
	// through its own idempotent producer.
	const producers = 2
	var pwg sync.WaitGroup
	stopProducing := make(chan struct{})
	var mu sync.Mutex
	sent := make([]int, streams)
	appendedAt := make([][]time.Time, streams)
	perrs := make([]error, producers)
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			prs := map[int]*client.IdempotentProducer{}
			defer func() {
				for _, pr := range prs {
					if err := pr.Close(ctx); err != nil && perrs[p] == nil {
						perrs[p] = err
					}
				}
			}()
			for k := 0; ; k++ {
				i := p + producers*(k%(streams/producers))
				select {
				case <-stopProducing:
					return
				case <-time.After(100 * time.Millisecond):
				}
				pr := prs[i]
				if pr == nil {
					s, err := client.NewStream(url("http://lb", i), client.Config{HTTPClient: lb,
						Retry: client.RetryPolicy{MaxAttempts: 1000, InitialDelay: 20 * time.Millisecond, MaxDelay: 300 * time.Millisecond}})
					if err != nil {
						perrs[p] = err
						return
					}
					s.SetContentType("application/json")
					if pr, err = client.NewIdempotentProducer(s, fmt.Sprintf("producer-%d", i), client.ProducerConfig{
						Linger: 2 * time.Millisecond, MaxInFlight: 1, RequestTimeout: 5 * time.Second}); err != nil {
						perrs[p] = err
						return
					}
					prs[i] = pr
				}
				mu.Lock()
				n := sent[i]
				sent[i]++
				appendedAt[i] = append(appendedAt[i], time.Now())
				mu.Unlock()
				if err := pr.AppendJSON(map[string]any{"type": "ticked", "payload": map[string]any{"by": 1, "n": n}}); err != nil {
					perrs[p] = err
					return
				}
			}
		}()
	}

	// Warm up until both nodes run counters and every stream had an effect, then stop node 0.
	stopped, other := nodes[0], nodes[1]
	inc, otherInc := stopped.incarnation(), other.incarnation()
	for {
		seen := map[string]bool{}
		by := map[string]bool{}
		for _, c := range effects.snapshot() {
			seen[c.Path] = true
			by[c.Node] = true
		}
		if len(seen) == streams && by[inc] && by[otherInc] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("warm-up: effects on %d of %d streams, from nodes %v", len(seen), streams, by)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("warm-up: every stream had an effect after %v", time.Since(start).Round(time.Millisecond))
	select {
	case <-time.After(2 * time.Second): // steady load
	case <-ctx.Done():
	}
	load := loadAverage()
	// The leases the stopped node holds at the signal, and when the last of them is live on the
	// other node (polled in the database, as the other node's scans would see them).
	pid := stopped.pid()
	var held []string
	if err := pgQueryRow(ctx, db, fmt.Sprintf(`SELECT coalesce(array_agg(key), '{}') FROM leases WHERE key LIKE 'processor%%'
		AND expires_at > clock_timestamp() AND holder LIKE '%%-%d-%%'`, pid), &held); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	moved := make(chan time.Duration, 1)
	go func() {
		for ctx.Err() == nil {
			var n int
			err := pgQueryRow(ctx, db, fmt.Sprintf(`SELECT count(*) FROM leases WHERE key = ANY('%s'::text[])
				AND expires_at > clock_timestamp() AND holder NOT LIKE '%%-%d-%%'`, pgTextArray(held), pid), &n)
			if err == nil && n == len(held) {
				moved <- time.Since(termAt)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond): // polling another process's commits
			}
		}
	}()
	stopped.term()
	exitedAfter := time.Since(termAt)
	var leasesMoved time.Duration
	select {
	case leasesMoved = <-moved:
	case <-time.After(time.Minute):
		t.Fatalf("the %d leases node %s held at the signal were not all live on the other node a minute later\n%s", len(held), inc, grepLogs(nodes, "host shut"))
	}
	t.Logf("SIGTERMed %s exited after %v", inc, exitedAfter.Round(time.Millisecond))
	select {
	case <-time.After(3 * time.Second): // the other node runs everything under the same load
	case <-ctx.Done():
	}
	close(stopProducing)
	pwg.Wait()
	stopFollowing()
	t.Logf("SIGTERM after %v; producers stopped after %v", termAt.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for p := range producers {
		if perrs[p] != nil {
			other.kill() // its log is read when it exits
			t.Fatalf("producer %d: %v\n%s", p, perrs[p], grepLogs(nodes, "level=WARN")+grepLogs(nodes, "level=ERROR")+grepLogs(nodes, "host shut"))
		}
	}

	// Every counter moved: its state, read through the remaining node, is the fold of its stream.
	total := 0
	for i := range streams {
		total += sent[i]
		var snap struct {
			State struct{ Ticks, Events int } `json:"state"`
		}
		log := readStream(ctx, t, http.DefaultClient, url(other.url(), i))
		u := fmt.Sprintf("%s/v1/processor/counter%s?waitUntilProcessed=%d&timeout=20s", other.url(), path(i), len(log))
		if err := getJSON(ctx, http.DefaultClient, u, &snap); err != nil {
			t.Fatalf("%s: processor: %v\nlogs:\n%s", path(i), err, allLogs(nodes))
		}
		if snap.State.Ticks != sent[i] || snap.State.Events != sent[i] {
			t.Fatalf("%s: processor state %+v, want %d ticks (the fold)", path(i), snap.State, sent[i])
		}
	}

	// Every tick had its effect; the streams the stopped node ran, and when the other node's first
	// effect came on each.
	calls := effects.snapshot()
	first := map[string]effectCall{} // path#n -> first call
	owner := map[string]effectCall{} // path -> the last call before the signal
	for _, c := range calls {
		k := fmt.Sprintf("%s#%d", c.Path, c.N)
		if _, ok := first[k]; !ok {
			first[k] = c
		}
		if c.at.Before(termAt) {
			owner[c.Path] = c
		}
	}
	var waits []time.Duration
	var worst string
	for i := range streams {
		for n := range sent[i] {
			if _, ok := first[fmt.Sprintf("%s#%d", path(i), n)]; !ok {
				t.Fatalf("%s: the side effect of tick %d never ran\n%s", path(i), n, grepLogs(nodes, path(i)))
			}
		}
		if owner[path(i)].Node != inc {
			continue
		}
		// The stream moved: its first tick whose effect came from the other node.
		for n := range sent[i] {
			c := first[fmt.Sprintf("%s#%d", path(i), n)]
			if c.Node != otherInc {
				continue
			}
			from := termAt
			if appendedAt[i][n].After(from) {
				from = appendedAt[i][n]
			}
			w := c.at.Sub(from)
			if len(waits) == 0 || w > slices.Max(waits) {
				worst = fmt.Sprintf("%s tick %d (appended %s, effect %s)", path(i), n,
					appendedAt[i][n].Sub(termAt).Round(time.Millisecond), c.at.Sub(termAt).Round(time.Millisecond))
			}
			waits = append(waits, w)
			break
		}
	}
	if len(waits) == 0 {
		t.Fatalf("node %s ran no stream at the signal", inc)
	}
	slices.Sort(waits)
	p50, most := waits[len(waits)/2], waits[len(waits)-1]
	t.Logf("%d ticks on %d streams; %d leases moved on SIGTERM, all live on the other node %v after the signal; the other node's first effect on each moved stream came p50 %v, max %v after the signal (or the tick's append) — worst %s; the stopped node exited after %v; load average %s",
		total, streams, len(held), leasesMoved.Round(time.Millisecond), p50.Round(time.Millisecond), most.Round(time.Millisecond), worst, exitedAfter.Round(time.Millisecond), load)
	// The hand-over's steps as the nodes logged them (debug level): the stopped node's engines
	// stopping and its leases' release, the other node's opening of each stream it took over.
	if os.Getenv("FOLDSTREAM_HANDOVER_LOGS") != "" {
		other.term() // its log is read when it exits
	}
	t.Logf("hand-over steps:\n%s%s%s%s", grepLogs(nodes, "handed the processors over"), grepLogs(nodes, "released leases when leaving"),
		grepLogs(nodes, "took a processor over"), grepLogs(nodes, "opened a processor taken over"))
	t.Logf("effects per 500 ms in the 5 s before the signal (stopped node, other node): %s", effectTimeline(calls, termAt.Add(-5*time.Second), inc, otherInc))
	t.Logf("effects per 500 ms after the signal (stopped node, other node): %s", effectTimeline(calls, termAt, inc, otherInc))
	// FOLDSTREAM_HANDOVER_LOGS=dir writes both nodes' whole logs to dir/nodes.log, for a closer look.
	if dir := os.Getenv("FOLDSTREAM_HANDOVER_LOGS"); dir != "" {
		_ = os.WriteFile(dir+"/nodes.log", []byte(fmt.Sprintf("signal at %s\n%s", termAt.UTC().Format(time.RFC3339Nano), allLogs(nodes))), 0o644)
	}
	bound := handOverBound
	if perCore := loadPerCore(load); perCore > handOverBusyLoad {
		bound = handOverBusyBound
		t.Logf("load average %.1f per core at the signal, over %.0f: the bound asserted is %v, not the goal of %v (see handOverBound)",
			perCore, handOverBusyLoad, bound, handOverBound)
	}
	if leasesMoved > bound {
		t.Fatalf("the stopped node's leases were all live on the other node %v after the signal, more than %v\n%s",
			leasesMoved.Round(time.Millisecond), bound, grepLogs(nodes, "host shut"))
	}
	if most > bound {
		t.Fatalf("the other node's first effect on a stream it took over came %v after the signal (%s), more than %v",
			most.Round(time.Millisecond), worst, bound)
	}
}

// follow long-polls the stream at url from its start until ctx ends, resuming after errors (its
// node stopped).
func follow(ctx context.Context, url string) {
	hc := &http.Client{Timeout: 30 * time.Second}
	offset := client.OffsetStart
	for ctx.Err() == nil {
		s, err := client.NewStream(url, client.Config{HTTPClient: hc, Retry: client.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			return
		}
		for c, err := range s.Read(ctx, client.ReadOptions{Offset: offset, Live: client.LiveLongPoll}) {
			if err != nil {
				break
			}
			offset = c.NextOffset
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // the node is gone or restarting
		}
	}
}

// pgTextArray writes keys as a PostgreSQL text array literal (keys hold no quote or backslash).
func pgTextArray(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = `"` + k + `"`
	}
	return "{" + strings.Join(quoted, ",") + "}"
}

// loadAverage returns /proc/loadavg's first three figures (empty where there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return ""
	}
	return string(b[:14])
}

// loadPerCore is the first figure of a loadAverage answer divided by the cores (0 when unknown).
func loadPerCore(load string) float64 {
	f, err := strconv.ParseFloat(strings.Fields(load + " 0")[0], 64)
	if err != nil {
		return 0
	}
	return f / float64(runtime.NumCPU())
}

// pid is the running process's id (its node id holds it: host name, pid, random).
func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

// effectTimeline counts the effect calls of nodes a and b in each half second of the ten after
// from.
func effectTimeline(calls []effectCall, from time.Time, a, b string) string {
	var na, nb [20]int
	for _, c := range calls {
		i := int(c.at.Sub(from) / (500 * time.Millisecond))
		if i < 0 || i >= len(na) {
			continue
		}
		switch c.Node {
		case a:
			na[i]++
		case b:
			nb[i]++
		}
	}
	var s strings.Builder
	for i := range na {
		fmt.Fprintf(&s, " %d/%d", na[i], nb[i])
	}
	return s.String()
}
