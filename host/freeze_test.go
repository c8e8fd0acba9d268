package host_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// freeze SIGSTOPs the process (it keeps its connections and its state, and runs nothing).
func (n *node) freeze() { n.signal(syscall.SIGSTOP) }

// thaw SIGCONTs a frozen process.
func (n *node) thaw() { n.signal(syscall.SIGCONT) }

func (n *node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		n.t.Fatalf("node %s is not running", n.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("signal %v to %s: %v", sig, n.name, err)
	}
}

// produceTicks writes "ticked" events to streams 0..streams-1 through hc, from producers
// goroutines, each stream through its own idempotent producer, until stop is closed; it returns
// how many ticks each stream got acknowledged, or the first producer's error.
func produceTicks(ctx context.Context, hc *http.Client, url func(base string, i int) string, streams, producers int, stop <-chan struct{}) ([]int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := make([]int, streams)
	errs := make([]error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prs := map[int]*client.IdempotentProducer{}
			defer func() {
				for _, pr := range prs {
					if err := pr.Close(ctx); err != nil && errs[p] == nil {
						errs[p] = err
					}
				}
			}()
			for k := 0; ; k++ {
				i := p + producers*(k%(streams/producers))
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				pr := prs[i]
				if pr == nil {
					s, err := client.NewStream(url("http://lb", i), client.Config{HTTPClient: hc,
						Retry: client.RetryPolicy{MaxAttempts: 1000, InitialDelay: 20 * time.Millisecond, MaxDelay: 300 * time.Millisecond}})
					if err != nil {
						errs[p] = err
						return
					}
					s.SetContentType("application/json")
					if pr, err = client.NewIdempotentProducer(s, fmt.Sprintf("producer-%d", i), client.ProducerConfig{
						Linger: 2 * time.Millisecond, MaxInFlight: 1, RequestTimeout: 5 * time.Second}); err != nil {
						errs[p] = err
						return
					}
					prs[i] = pr
				}
				mu.Lock()
				n := sent[i]
				sent[i]++
				mu.Unlock()
				if err := pr.AppendJSON(map[string]any{"type": "ticked", "payload": map[string]any{"by": 1, "n": n}}); err != nil {
					errs[p] = err
					return
				}
			}
		}()
	}
	<-stop
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("producer %d: %w", p, err)
		}
	}
	return sent, nil
}

// TestANodeWokenFromAFreezePastItsLeaseRunsNoEffectForTheStreamsItLost: three node processes on
// one PostgreSQL database run a pattern processor over 30 streams, each tick's external effect a
// call to the test's endpoint (recording the node incarnation, the lease generation, when the
// work began on the node and when the call arrived). Under steady writes, two nodes in turn are
// frozen (SIGSTOP) for three lease times — the others take their streams over — and then woken
// (SIGCONT), still believing they hold those streams, with their pushed work queued. The effect
// checker then decides from the records alone: every effect that ran twice was in flight at the
// freeze of its first runner (begun before it), and no woken node ran an effect its successor
// had run, nor ran a stream beside its successor, nor under an older generation after it.
func TestANodeWokenFromAFreezePastItsLeaseRunsNoEffectForTheStreamsItLost(t *testing.T) {
	db := pgtest.URL(t)
	effects := &effectLog{}
	es := httptest.NewServer(effects)
	defer es.Close()
	const ttl = 2 * time.Second
	nodes := startNodes(t, db, 3, ttl, "--effects", es.URL)
	lb := lbClient(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const streams = 30
	path := func(i int) string { return fmt.Sprintf("/counters/f%03d", i) }
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
	stop := make(chan struct{})
	type produced struct {
		sent []int
		err  error
	}
	sentCh := make(chan produced, 1)
	go func() {
		sent, err := produceTicks(ctx, lb, url, streams, 3, stop)
		sentCh <- produced{sent, err}
	}()

	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal("timed out")
		}
	}
	var faults []injectedFault
	const freezes = 2
	for f := range freezes {
		wait(2 * ttl) // every node runs its share under load
		nd := nodes[f]
		fault := injectedFault{Node: nd.incarnation(), Kind: faultFreeze, At: time.Now()}
		nd.freeze()
		wait(3 * ttl) // past the lease: the others take its streams over
		nd.thaw()
		fault.Until = time.Now()
		faults = append(faults, fault)
	}
	wait(2 * ttl) // the woken nodes run again, beside the load
	close(stop)
	pr := <-sentCh
	if pr.err != nil {
		t.Fatal(pr.err)
	}
	sent := pr.sent
	total := 0
	for _, n := range sent {
		total += n
	}
	if total < 200 {
		t.Fatalf("only %d ticks were acknowledged; the test needs load", total)
	}

	// Every processor reaches its stream's head (a read through any node, as the cluster test
	// reads: it also heals an engine whose last push failed), and every acknowledged tick's effect
	// runs, on some node.
	for i := range streams {
		log := readStream(ctx, t, lb, url("http://lb", i))
		var snap struct {
			Offset int64 `json:"offset"`
		}
		u := fmt.Sprintf("http://lb/v1/processor/counter%s?waitUntilProcessed=%d&timeout=20s", path(i), len(log))
		if err := getJSON(ctx, lb, u, &snap); err != nil {
			t.Fatalf("%s: processor: %v", path(i), err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ran := map[string]bool{}
		for _, c := range effects.snapshot() {
			ran[fmt.Sprintf("%s#%d", c.Path, c.N)] = true
		}
		missing := ""
		for i := range streams {
			for n := range sent[i] {
				if k := fmt.Sprintf("%s#%d", path(i), n); !ran[k] && missing == "" {
					missing = k
				}
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			for _, nd := range nodes {
				nd.kill() // a node's log is read once it exited
			}
			t.Fatalf("the effect of %s never ran\n%s", missing, grepLogs(nodes, "WARN")+grepLogs(nodes, "ERROR"))
		}
		wait(100 * time.Millisecond) // effects run after their ticks
	}

	calls := effects.snapshot()
	runs := make([]effectRun, len(calls))
	for i, c := range calls {
		runs[i] = c.run()
	}
	// Positive control: each freeze was felt — another node ran, after the freeze began and under
	// a newer lease generation, a stream the frozen node had run before it (it had streams to
	// lose, and lost them).
	for _, f := range faults {
		before := map[string]int64{} // path -> the frozen node's generation
		for _, r := range runs {
			if r.Node == f.Node && r.Start.Before(f.At) {
				before[r.Path] = max(before[r.Path], r.Gen)
			}
		}
		taken := map[string]bool{}
		for _, r := range runs {
			if g, ok := before[r.Path]; ok && r.Node != f.Node && r.Start.After(f.At) && r.Gen > g {
				taken[r.Path] = true
			}
		}
		if len(taken) == 0 {
			t.Fatalf("the freeze of %s (%s to %s) moved none of its %d streams: the test saw no takeover", f.Node, stamp(f.At), stamp(f.Until), len(before))
		}
		t.Logf("freeze of %s: %d of its %d streams taken over", f.Node, len(taken), len(before))
	}
	rep := checkEffects(runs, faults, inFlightWindow(ttl))
	if len(rep.Violations) > 0 {
		for _, nd := range nodes {
			nd.kill() // a node's log is read once it exited
		}
		if dir := os.Getenv("FOLDSTREAM_TEST_DUMP"); dir != "" {
			dumpHistory(t, dir, runs, faults, nodes)
		}
		t.Fatalf("%d violations:\n%s\nlease lines of the nodes' logs:\n%s", len(rep.Violations), joinLines(rep.Violations, 20), grepLogs(nodes, "lease"))
	}
	t.Logf("%d ticks on %d streams through %d freezes of %v; %d effects ran again on another node after a freeze (in flight at it), %d again on their own node near a freeze (a write that failed), %d runs overlapped a frozen node's",
		total, streams, freezes, 3*ttl, rep.Repeats, rep.Retried, rep.Overlaps)
}

// dumpHistory writes the runs, the faults and the nodes' logs under dir, to read a failure at
// leisure (FOLDSTREAM_TEST_DUMP names dir).
func dumpHistory(t *testing.T, dir string, runs []effectRun, faults []injectedFault, nodes []*node) {
	var b strings.Builder
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b effectRun) int { return a.Start.Compare(b.Start) })
	for _, r := range sorted {
		fmt.Fprintf(&b, "%s %s %s gen=%d end=%s\n", stamp(r.Start), r.Node, r.Key, r.Gen, stamp(r.End))
	}
	fmt.Fprintf(&b, "faults: %s\n", describeFaults(faults))
	_ = os.WriteFile(filepath.Join(dir, "runs.txt"), []byte(b.String()), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "logs.txt"), []byte(allLogs(nodes)), 0o644)
	t.Logf("history written under %s", dir)
}

// joinLines joins at most n of lines, saying how many were left out.
func joinLines(lines []string, n int) string {
	out := ""
	for i, l := range lines {
		if i == n {
			out += fmt.Sprintf("... and %d more\n", len(lines)-n)
			break
		}
		out += l + "\n"
	}
	return out
}
