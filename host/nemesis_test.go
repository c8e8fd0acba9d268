package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/foldstream/foldstream/internal/harness/history"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// The mixed-nemesis soak (docs/reliability.md#the-mixed-nemesis-soak): three node processes on a
// PostgreSQL of the test's own, each reaching it through a proxy the test can cut, run the
// counter pattern over 100 streams; every tick's ProcessEvent calls the test's effect endpoint
// (naming the node incarnation and the lease generation). Each round injects one fault, heals
// it, waits until every tick acknowledged by then has had its effect, and hands the records to
// the checkers — none of them reads what the nodes log.

// The soak's knobs. FOLDSTREAM_NEMESIS_ROUNDS runs the long form: that many rounds of faults
// drawn at random from all five; FOLDSTREAM_NEMESIS_MAX (a Go duration) bounds its time and
// FOLDSTREAM_NEMESIS_REPORT names a file its figures are written to. FOLDSTREAM_NEMESIS_KINDS
// (fault names, comma-separated: kill,freeze,term,db cut,db restart) draws the faults from those
// only, to reproduce one; FOLDSTREAM_NEMESIS_LOGS keeps the nodes' logs of a failed run. Without
// them the short form runs one round of each fault but the database cut.
const (
	nemesisKindsEnv  = "FOLDSTREAM_NEMESIS_KINDS"
	nemesisRoundsEnv = "FOLDSTREAM_NEMESIS_ROUNDS"
	nemesisMaxEnv    = "FOLDSTREAM_NEMESIS_MAX"
	nemesisReportEnv = "FOLDSTREAM_NEMESIS_REPORT"
	// nemesisLogsEnv names a directory the nodes' logs (every incarnation's) are written to
	// when the soak fails, for the violation's diagnosis.
	nemesisLogsEnv = "FOLDSTREAM_NEMESIS_LOGS"
)

// The faults of the soak beyond the cluster tests' kill, freeze and graceful stop: a node's
// database connections cut (closed, new ones refused) for a while, and the database restarted
// -m immediate (a fault of every node at once).
const (
	faultDBCut     faultKind = "db cut"
	faultDBRestart faultKind = "db restart"
)

// nemesisKinds is the order the short form injects its faults in.
var nemesisKinds = []faultKind{faultKill, faultFreeze, faultTerm, faultDBCut, faultDBRestart}

// TestThreeNodesUnderMixedNemesesLoseNoTickRunNoZombieEffectAndFailOver is the soak. Its
// checkers, after every round:
//
//   - the ticks: each stream's log holds ticks 0, 1, 2, ... exactly once, in order, and at
//     least every tick its producer saw acknowledged (none lost, none duplicated);
//   - the effect events: each one names a ticked event at the offset it gives (the log's offsets
//     are what the processor saw);
//   - the snapshots: every processor state read during the round, through any node, is the fold
//     of its stream's prefix through the offset it was read at;
//   - the effects: checkEffects over every run so far and every fault injected so far (a repeat
//     only where a fault of its first runner explains it; no run under an older lease
//     generation after a newer one — no zombie after a takeover; no two nodes running one
//     stream at once that a fault does not explain), and every acknowledged tick's effect ran;
//   - the plain streams: a Porcupine-checked workload of appends, producers and reads through
//     the three nodes is linearizable (internal/harness/history).
//
// It measures, per fault kind, how long each stream the fault moved went without its effects:
// from the fault (or from its first tick owed after the fault, when that came later) to the
// first effect run by its new owner (another node incarnation, or the same under a new lease
// generation).
func TestThreeNodesUnderMixedNemesesLoseNoTickRunNoZombieEffectAndFailOver(t *testing.T) {
	// The short form: one round of each fault.
	kinds := nemesisKinds
	rounds, long := len(kinds), false
	if v := os.Getenv(nemesisRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a number of rounds", nemesisRoundsEnv, v)
		}
		kinds, rounds, long = nemesisKinds, n, true
	}
	maxDur := 24 * time.Hour
	if v := os.Getenv(nemesisMaxEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a duration", nemesisMaxEnv, v)
		}
		maxDur = d
	}
	if v := os.Getenv(nemesisKindsEnv); v != "" {
		kinds = nil
		for name := range strings.SplitSeq(v, ",") {
			k := faultKind(strings.TrimSpace(name))
			if !slices.Contains(nemesisKinds, k) {
				t.Fatalf("%s: %q is none of %v", nemesisKindsEnv, k, nemesisKinds)
			}
			kinds = append(kinds, k)
		}
	}
	soakUnderNemeses(t, kinds, rounds, long, maxDur)
}

// soakUnderNemeses runs rounds of faults drawn from kinds (in turn; at random when long, which
// also goes on after a round's violations) for at most maxDur.
func soakUnderNemeses(t *testing.T, kinds []faultKind, rounds int, long bool, maxDur time.Duration) {
	const ttl = 2 * time.Second
	const streams = 100
	srv := pgtest.StartServer(t)
	sink := newEffectSink()
	es := httptest.NewServer(sink)
	defer es.Close()

	// Each node reaches the database through its own proxy.
	bin := buildNode(t)
	nodes := make([]*node, 3)
	proxies := make([]*pgtest.Proxy, 3)
	for i := range nodes {
		p, via := pgtest.NewProxy(t, srv.URL())
		proxies[i] = p
		nodes[i] = &node{t: t, bin: bin, db: via, addr: freeAddr(t), ttl: ttl, logs: &strings.Builder{},
			name: fmt.Sprintf("n%d", i), args: []string{"--effects", es.URL}}
		nodes[i].start()
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.kill()
		}
		if dir := os.Getenv(nemesisLogsEnv); dir != "" && t.Failed() {
			// Every incarnation's log is complete once its process ended.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Log(err)
				return
			}
			for _, nd := range nodes {
				if err := os.WriteFile(filepath.Join(dir, nd.name+".log"), []byte(nd.logText()), 0o644); err != nil {
					t.Log(err)
				}
			}
			t.Logf("the nodes' logs are in %s", dir)
		}
	})
	lb := lbClient(nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	path := func(i int) string { return fmt.Sprintf("/counters/s%03d", i) }
	createStreams(ctx, t, lb, path, streams)
	tp := &tickProducers{hc: lb, path: path, acked: make([][]time.Time, streams)}
	pctx, stopProducing := context.WithCancel(ctx)
	pdone := tp.run(pctx, 20)
	defer func() { stopProducing(); <-pdone }()
	sampler := &snapshotSampler{hc: &http.Client{}, nodes: nodes, path: path, streams: streams}
	sdone := sampler.run(pctx)
	defer func() { stopProducing(); <-sdone }()
	logs := &streamLogs{hc: lb, path: path, logs: make([][]json.RawMessage, streams), next: make([]string, streams)}

	var faults []injectedFault
	fig := map[faultKind]*failoverFigures{}
	var violations, stalls int
	reported := map[string]bool{} // the effect checker reads every run so far: a violation is counted once
	start := time.Now()
	done := 0
	for r := 0; r < rounds && time.Since(start) < maxDur; r++ {
		kind := kinds[r%len(kinds)]
		if long {
			kind = kinds[rand.IntN(len(kinds))]
		}
		i := rand.IntN(len(nodes))
		nd := nodes[i]
		w := startPlainLoad(t, fmt.Sprintf("r%d-", r), nodes)

		// Load first: effects flowing on the streams before the fault.
		from := sink.count()
		waitUntil(t, 60*time.Second, "effects before the fault", func() bool { return sink.count() >= from+100 })
		snapFrom := sampler.mark()

		var round []injectedFault
		inc := nd.incarnation()
		at := time.Now()
		switch kind {
		case faultKill:
			nd.kill()
			round = append(round, injectedFault{Node: inc, Kind: kind, At: at, Until: time.Now()})
			nd.start()
		case faultTerm:
			nd.term()
			round = append(round, injectedFault{Node: inc, Kind: kind, At: at, Until: time.Now()})
			nd.start()
		case faultFreeze:
			nd.freeze()
			pause(2 * ttl) // past its lease: the others take its streams
			nd.thaw()
			round = append(round, injectedFault{Node: inc, Kind: kind, At: at, Until: time.Now()})
		case faultDBCut:
			if dropped := proxies[i].Cut(); dropped == 0 {
				t.Fatalf("round %d: positive control: cutting %s's database dropped no connection", r, inc)
			}
			pause(2 * ttl) // past its lease
			proxies[i].Restore()
			round = append(round, injectedFault{Node: inc, Kind: kind, At: at, Until: time.Now()})
		case faultDBRestart:
			srv.Restart("immediate")
			until := time.Now()
			for _, n := range nodes {
				round = append(round, injectedFault{Node: n.incarnation(), Kind: kind, At: at, Until: until})
			}
		}
		faults = append(faults, round...)
		healed := time.Now()

		// Every stream gets a tick after the heal (so each one's resumption is measured), and
		// every tick acknowledged by then has its effect, within the liveness bound.
		atHeal := tp.ackedCounts()
		waitUntil(t, 60*time.Second, "a tick on every stream after the heal", func() bool {
			for i, n := range tp.ackedCounts() {
				if n <= atHeal[i] {
					return false
				}
			}
			return true
		})
		owed := tp.ackedCounts()
		if !wait.Every(livenessBound(ttl)+30*time.Second, 50*time.Millisecond, func() bool { return sink.coveredAll(path, owed) }) {
			missing := sink.missing(path, owed, 10)
			status := processorStatus(lb, missing)
			if long {
				// The long form records the stall and goes on: its figures still count, and a
				// later round shows whether the processors came back.
				stalls++
				violations++
				t.Errorf("round %d (%s of %s): ticks acknowledged by the heal still have no effect %v later: %s\nprocessors:\n%s",
					r, kind, inc, time.Since(healed).Round(time.Millisecond), strings.Join(missing, ", "), status)
			} else {
				for _, nd := range nodes {
					nd.kill() // a node's log is read once it exited
				}
				first, _, _ := strings.Cut(missing[0], "#")
				t.Fatalf("round %d (%s of %s): ticks acknowledged by the heal still have no effect %v later: %s\nprocessors:\n%s\nthe nodes' last lines on %s:\n%s",
					r, kind, inc, time.Since(healed).Round(time.Millisecond), strings.Join(missing, ", "), status, first, lastLines(grepLogs(nodes, first), 30))
			}
		}
		plain := w.finish(t)

		// The checkers.
		var bad []string
		snapTo := sampler.mark() // the logs are read after these snapshots were taken
		calls := sink.snapshot()
		runs := sink.runs()
		bad = append(bad, logs.check(t, tp.ackedCounts(), calls)...)
		bad = append(bad, sampler.check(snapFrom, snapTo, logs)...)
		rep := checkEffects(runs, faults, killInFlightWindow(ttl))
		for _, v := range rep.Violations {
			key, _, _ := strings.Cut(v, " (faults:") // the list of faults grows every round
			if !reported[key] {
				reported[key] = true
				bad = append(bad, v)
			}
		}
		if plain.Verdict != porcupine.Ok {
			bad = append(bad, fmt.Sprintf("plain streams: %v\n%s", plain.Verdict, plain.Explanation))
		}
		f := fig[kind]
		if f == nil {
			f = &failoverFigures{}
			fig[kind] = f
		}
		f.faults++
		moved, resumed := failovers(runs, round[0], kind == faultDBRestart, tp.ackTimes())
		f.failover = append(f.failover, moved...)
		f.resume = append(f.resume, resumed...)
		done++
		t.Logf("round %d: %s of %s: %d streams moved (failover max %v), %d resumed; %d effect runs, %d repeats explained, %d retried in place, %d overlaps explained; plain: %v; %d violations",
			r, kind, inc, len(moved), maxDur0(moved), len(resumed), len(runs), rep.Repeats, rep.Retried, rep.Overlaps, plain.Counts, len(bad))
		if len(bad) > 0 {
			violations += len(bad)
			t.Errorf("round %d (%s of %s): %d violations:\n%s", r, kind, inc, len(bad), joinLines(bad, 20))
			if !long {
				break
			}
		}
	}

	// The end: producers flushed, every acknowledged tick in its log exactly once.
	stopProducing()
	<-pdone
	<-sdone
	if err := tp.error(); err != nil {
		t.Fatal(err)
	}
	final := logs.check(t, tp.ackedCounts(), sink.snapshot())
	final = append(final, logs.checkFinalFolds(t, lb)...)
	if len(final) > 0 {
		violations += len(final)
		t.Errorf("final read: %s", joinLines(final, 20))
	}
	ticks := 0
	for _, n := range tp.ackedCounts() {
		ticks += n
	}
	rep := checkEffects(sink.runs(), faults, killInFlightWindow(ttl))
	report := nemesisReport(done, time.Since(start), ticks, streams, ttl, len(sink.runs()), rep, violations, stalls, fig)
	t.Log("\n" + report)
	if p := os.Getenv(nemesisReportEnv); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	if done < len(kinds) && !long {
		t.Errorf("positive control: %d rounds ran, want one of each of %d faults", done, len(kinds))
	}
}

// pause waits d: a fault that lasts (a freeze, a cut) lasts for d.
func pause(d time.Duration) { <-time.After(d) }

// waitUntil polls the processes' records until cond holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !wait.Every(d, 50*time.Millisecond, cond) {
		t.Fatalf("waited %v for %s", d, what)
	}
}

// ---- the ticks ------------------------------------------------------------------------------

// createStreams creates the JSON streams path(0) … path(n-1) through hc.
func createStreams(ctx context.Context, t *testing.T, hc *http.Client, path func(int) string, n int) {
	t.Helper()
	for i := range n {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://lb/v1/stream"+path(i), nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// tickProducers write "ticked" events, each stream through its own idempotent producer (one
// request per tick, the same seq retried until the server answers), and note when each tick was
// acknowledged.
type tickProducers struct {
	hc   *http.Client
	path func(int) string

	mu    sync.Mutex
	acked [][]time.Time // acked[i][n]: when tick n of stream i was acknowledged
	err   error
}

func (tp *tickProducers) run(ctx context.Context, producers int) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	streams := len(tp.acked)
	for p := range producers {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				i := p + producers*(k%(streams/producers))
				tp.mu.Lock()
				n := len(tp.acked[i])
				tp.mu.Unlock()
				if err := tp.tick(ctx, i, n); err != nil {
					if ctx.Err() == nil {
						tp.mu.Lock()
						tp.err = err
						tp.mu.Unlock()
					}
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// tick appends tick n of stream i, retrying until it is acknowledged (200, or 204 for a seq an
// earlier attempt applied). It gives up only when ctx ends — then n stays unacknowledged and the
// final read may or may not show it — or on an answer a producer in order never gets.
func (tp *tickProducers) tick(ctx context.Context, i, n int) error {
	body := fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, n)
	for fails := 0; ; fails++ {
		if fails > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond << min(fails, 4)):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "http://lb/v1/stream"+tp.path(i), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Producer-Id", fmt.Sprintf("tick%d", i))
		req.Header.Set("Producer-Epoch", "0")
		req.Header.Set("Producer-Seq", strconv.Itoa(n))
		resp, err := tp.hc.Do(req)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		switch {
		case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent:
			tp.mu.Lock()
			tp.acked[i] = append(tp.acked[i], time.Now())
			tp.mu.Unlock()
			return nil
		case resp.StatusCode >= 500:
			continue
		default:
			return fmt.Errorf("%s tick %d: %d %s", tp.path(i), n, resp.StatusCode, b)
		}
	}
}

func (tp *tickProducers) ackedCounts() []int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([]int, len(tp.acked))
	for i, a := range tp.acked {
		out[i] = len(a)
	}
	return out
}

func (tp *tickProducers) ackTimes() [][]time.Time {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([][]time.Time, len(tp.acked))
	for i, a := range tp.acked {
		out[i] = append([]time.Time(nil), a...)
	}
	return out
}

func (tp *tickProducers) error() error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.err
}

// streamLogs is the test's copy of every counter stream's log, read on from where it stopped. A
// read gives no message its offset, and offsets may skip (an ephemeral event takes one and is not
// stored, docs/store.md), so the offset of tick n is learnt from its effect event, which names it.
type streamLogs struct {
	hc   *http.Client
	path func(int) string
	logs [][]json.RawMessage
	next []string
	// tickAt[i][n] is the offset of tick n of stream i, as its effect event gives it (0: not
	// known yet).
	tickAt [][]int64
}

// readOn reads stream i on to its tail.
func (l *streamLogs) readOn(t *testing.T, i int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		from := l.next[i]
		if from == "" {
			from = "-1"
		}
		req, _ := http.NewRequest(http.MethodGet, "http://lb/v1/stream"+l.path(i)+"?offset="+from, nil)
		resp, err := l.hc.Do(req)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				var msgs []json.RawMessage
				if err := json.Unmarshal(b, &msgs); err != nil {
					t.Fatalf("%s: undecodable read: %v", l.path(i), err)
				}
				l.logs[i] = append(l.logs[i], msgs...)
				l.next[i] = resp.Header.Get("Stream-Next-Offset")
				if resp.Header.Get("Stream-Up-To-Date") == "true" {
					return
				}
				continue
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s: %v", l.path(i), err)
		}
		pause(100 * time.Millisecond)
	}
}

// check reads every stream on and returns what is wrong with its ticks and effect events: a tick
// lost, duplicated or out of order; an effect event that comes before its tick, lands twice, or
// gives tick offsets that do not increase with the ticks; an effect run (runs) for an offset
// other than its tick's.
func (l *streamLogs) check(t *testing.T, acked []int, calls []effectCall) []string {
	t.Helper()
	var bad []string
	if l.tickAt == nil {
		l.tickAt = make([][]int64, len(l.logs))
	}
	for i := range l.logs {
		l.readOn(t, i)
		next := 0
		seenAt := map[int]int{}    // tick n → its position in the log (1-based)
		effects := map[int]int{}   // tick n → how many effect events
		offsets := map[int]int64{} // tick n → its offset, from its effect event
		for k, raw := range l.logs[i] {
			var m message
			if err := json.Unmarshal(raw, &m); err != nil {
				bad = append(bad, fmt.Sprintf("%s message %d: undecodable %s", l.path(i), k+1, raw))
				continue
			}
			switch m.Type {
			case "ticked":
				if m.Payload.N != next {
					bad = append(bad, fmt.Sprintf("%s message %d: tick %d where %d is due (lost, duplicated or reordered)", l.path(i), k+1, m.Payload.N, next))
				}
				seenAt[m.Payload.N] = k + 1
				next = m.Payload.N + 1
			case "effect":
				n := m.Payload.N
				effects[n]++
				offsets[n] = m.Payload.Of
				if pos, ok := seenAt[n]; !ok || m.Payload.Of < int64(pos) {
					bad = append(bad, fmt.Sprintf("%s message %d: the effect event of tick %d (offset %d) before the tick or below its position %d", l.path(i), k+1, n, m.Payload.Of, pos))
				}
			}
		}
		for n, c := range effects {
			if c > 1 {
				bad = append(bad, fmt.Sprintf("%s: the effect event of tick %d landed %d times", l.path(i), n, c))
			}
		}
		l.tickAt[i] = make([]int64, next)
		var prev int64
		for n := range next {
			off := offsets[n]
			if off != 0 && off <= prev {
				bad = append(bad, fmt.Sprintf("%s: tick %d at offset %d, not after the offset %d of a tick before it", l.path(i), n, off, prev))
			}
			if off != 0 {
				prev = off
			}
			l.tickAt[i][n] = off
		}
		if next < acked[i] {
			bad = append(bad, fmt.Sprintf("%s: %d ticks in the log, %d acknowledged (lost)", l.path(i), next, acked[i]))
		}
	}
	for _, c := range calls {
		var i int
		if _, err := fmt.Sscanf(c.Path, "/counters/s%03d", &i); err != nil || i >= len(l.tickAt) {
			bad = append(bad, fmt.Sprintf("an effect run for %s, which names no stream of the soak", c.Path))
			continue
		}
		if c.N < 0 || c.N >= len(l.tickAt[i]) {
			bad = append(bad, fmt.Sprintf("%s#%d: an effect ran on %s for a tick the log does not hold", c.Path, c.N, c.Node))
		} else if at := l.tickAt[i][c.N]; at != 0 && c.Offset != at {
			bad = append(bad, fmt.Sprintf("%s#%d: an effect ran on %s for offset %d; the tick is at %d", c.Path, c.N, c.Node, c.Offset, at))
		}
	}
	return bad
}

// checkFinalFolds, once the ticks stopped, waits until every tick's effect event landed, then
// asks each stream's processor for its state through the log's tail: it must be the fold of the
// whole log (a tick the processor passed over stays out of every later state).
func (l *streamLogs) checkFinalFolds(t *testing.T, hc *http.Client) []string {
	t.Helper()
	waitUntil(t, 60*time.Second, "every tick's effect event", func() bool {
		l.check(t, make([]int, len(l.logs)), nil)
		for i := range l.tickAt {
			for _, at := range l.tickAt[i] {
				if at == 0 {
					return false
				}
			}
		}
		return true
	})
	var bad []string
	for i := range l.logs {
		var snap sampledSnapshot
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := getJSON(ctx, hc, fmt.Sprintf("http://lb/v1/processor/counter%s?waitUntilProcessed=%s&timeout=20s", l.path(i), l.next[i]), &snap)
		cancel()
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: no final state: %v", l.path(i), err))
			continue
		}
		at := l.tickAt[i]
		var last int64
		if len(at) > 0 {
			last = at[len(at)-1]
		}
		if snap.State.Ticks != len(at) || snap.State.Events != len(at) || snap.State.Last != last {
			bad = append(bad, fmt.Sprintf("%s: the final state through offset %d is %+v; the log holds %d ticks, the last at %d", l.path(i), snap.Offset, snap.State, len(at), last))
		}
	}
	return bad
}

// ---- the snapshots --------------------------------------------------------------------------

// snapshotSampler reads processor states through every node, one chosen at random for each read,
// while the soak runs.
type snapshotSampler struct {
	hc      *http.Client
	nodes   []*node
	path    func(int) string
	streams int

	mu    sync.Mutex
	snaps []sampledSnapshot
}

type sampledSnapshot struct {
	stream int
	node   string // the node incarnation that answered
	at     time.Time
	marked string // the Foldstream-Processor-State header: "failing" or "paused" for a last good state
	Offset int64  `json:"offset"`
	State  struct {
		Ticks  int   `json:"ticks"`
		Events int   `json:"events"`
		Last   int64 `json:"last"`
	} `json:"state"`
}

// run samples until ctx ends, one reader per node (a node that does not answer holds up only its
// own reader).
func (s *snapshotSampler) run(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, nd := range s.nodes {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := rand.IntN(s.streams)
				inc, at := nd.incarnation(), time.Now()
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				req, _ := http.NewRequestWithContext(rctx, http.MethodGet, nd.url()+"/v1/processor/counter"+s.path(i), nil)
				if resp, err := s.hc.Do(req); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var snap sampledSnapshot
					if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &snap) == nil {
						// A failing or paused processor answers its last good state, marked
						// (docs/operations.md#last-good-state): a prefix fold all the same.
						snap.stream, snap.node, snap.at = i, inc, at
						snap.marked = resp.Header.Get("Foldstream-Processor-State")
						s.mu.Lock()
						s.snaps = append(s.snaps, snap)
						s.mu.Unlock()
					}
				}
				cancel()
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// mark is how many snapshots were sampled so far.
func (s *snapshotSampler) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.snaps)
}

// check judges the snapshots sampled between marks from and to: each must be the fold of its
// stream's prefix through its offset (the logs must have been read on after to). It also wants
// some snapshots, or it checked nothing.
func (s *snapshotSampler) check(from, to int, l *streamLogs) []string {
	s.mu.Lock()
	snaps := append([]sampledSnapshot(nil), s.snaps[from:to]...)
	s.mu.Unlock()
	if len(snaps) == 0 {
		return []string{"positive control: no processor snapshot was read in the round"}
	}
	var bad []string
	checked := 0
	for _, sn := range snaps {
		at := l.tickAt[sn.stream]
		k := sn.State.Ticks
		if sn.State.Events != k || k > len(at) {
			bad = append(bad, fmt.Sprintf("%s: the snapshot through offset %d is %+v: not a fold of the log's %d ticks", l.path(sn.stream), sn.Offset, sn.State, len(at)))
			continue
		}
		// The fold through offset O has reduced exactly the ticks at offsets up to O: ticks
		// 0..k-1, the last of them at State.Last <= O, and tick k (if any) after O.
		if k > 0 && at[k-1] == 0 || k < len(at) && at[k] == 0 {
			continue // an effect event not landed yet: that offset is not known
		}
		var last int64
		if k > 0 {
			last = at[k-1]
		}
		if sn.State.Last != last || sn.Offset < last || k < len(at) && at[k] <= sn.Offset {
			next := "none"
			if k < len(at) {
				next = strconv.FormatInt(at[k], 10)
			}
			marked := ""
			if sn.marked != "" {
				marked = " (marked " + sn.marked + ": its last good state)"
			}
			bad = append(bad, fmt.Sprintf("%s: the snapshot through offset %d read from %s at %s is %+v%s; the fold through that offset: ticks 0..%d, the last at %d (the next tick at %s)",
				l.path(sn.stream), sn.Offset, sn.node, stamp(sn.at), sn.State, marked, k-1, last, next))
		}
		checked++
	}
	if checked == 0 {
		bad = append(bad, "positive control: no processor snapshot of the round could be checked")
	}
	return bad
}

// ---- the effects ----------------------------------------------------------------------------

// effectSink is the external effect's endpoint: it records every call, and which ticks have had
// theirs.
type effectSink struct {
	mu    sync.Mutex
	calls []effectCall
	ran   map[string]bool
}

func newEffectSink() *effectSink { return &effectSink{ran: map[string]bool{}} }

func (e *effectSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var c effectCall
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.at = time.Now()
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.ran[fmt.Sprintf("%s#%d", c.Path, c.N)] = true
	e.mu.Unlock()
}

func (e *effectSink) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.calls)
}

// coveredAll reports whether ticks 0..owed[i]-1 of every stream i had their effect.
func (e *effectSink) coveredAll(path func(int) string, owed []int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, n := range owed {
		for k := n - 1; k >= 0; k-- {
			if !e.ran[fmt.Sprintf("%s#%d", path(i), k)] {
				return false
			}
		}
	}
	return true
}

func (e *effectSink) missing(path func(int) string, owed []int, most int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for i, n := range owed {
		for k := range n {
			if key := fmt.Sprintf("%s#%d", path(i), k); !e.ran[key] && len(out) < most {
				out = append(out, key)
			}
		}
	}
	return out
}

// processorStatus returns what the nodes say of the processors of the streams of keys
// (path#tick), one line each.
func processorStatus(hc *http.Client, keys []string) string {
	var b strings.Builder
	asked := map[string]bool{}
	for _, k := range keys {
		p, _, _ := strings.Cut(k, "#")
		if asked[p] {
			continue
		}
		asked[p] = true
		req, _ := http.NewRequest(http.MethodGet, "http://lb/v1/streams/info?path="+p, nil)
		resp, err := hc.Do(req)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&b, "%s: %s\n", p, body)
	}
	return b.String()
}

func (e *effectSink) snapshot() []effectCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]effectCall(nil), e.calls...)
}

func (e *effectSink) runs() []effectRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]effectRun, len(e.calls))
	for i, c := range e.calls {
		out[i] = c.run()
	}
	return out
}

// lastLines returns the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// ---- failover -------------------------------------------------------------------------------

// failovers measures, for the streams fault f touched (those whose last effect before it ran on
// f's node; every stream for a database restart), how long each went without effects: from the
// fault, or from the acknowledgement of its first tick owed at the fault when that came later,
// to its first effect after. moved holds the streams whose first effect after came from a new
// owner (another incarnation, or a new lease generation); resumed every touched stream.
func failovers(runs []effectRun, f injectedFault, everyStream bool, acks [][]time.Time) (moved, resumed []time.Duration) {
	byPath := map[string][]effectRun{}
	for _, r := range runs {
		byPath[r.Path] = append(byPath[r.Path], r)
	}
	for p, rs := range byPath {
		sort.Slice(rs, func(i, j int) bool { return rs[i].End.Before(rs[j].End) })
		var before *effectRun
		doneBefore := map[string]bool{}
		for k := range rs {
			if rs[k].End.Before(f.At) {
				before = &rs[k]
				doneBefore[rs[k].Key] = true
			}
		}
		if before == nil || (!everyStream && before.Node != f.Node) {
			continue
		}
		// The first tick owed at the fault: the lowest without an effect before it.
		var i int
		if _, err := fmt.Sscanf(p, "/counters/s%03d", &i); err != nil || i >= len(acks) {
			continue
		}
		owedAt := f.At
		n := 0
		for doneBefore[fmt.Sprintf("%s#%d", p, n)] {
			n++
		}
		if n >= len(acks[i]) {
			continue // nothing acknowledged was owed yet
		}
		if acks[i][n].After(owedAt) {
			owedAt = acks[i][n]
		}
		for _, r := range rs {
			if !r.End.After(f.At) {
				continue
			}
			d := max(r.End.Sub(owedAt), 0)
			resumed = append(resumed, d)
			if r.Node != before.Node || r.Gen != before.Gen {
				moved = append(moved, d)
			}
			break
		}
	}
	return moved, resumed
}

// failoverFigures gathers one fault kind's measurements over the rounds.
type failoverFigures struct {
	faults           int
	failover, resume []time.Duration
}

func maxDur0(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond)
}

// percentile is the nearest-rank p-th percentile of ds (0 for none).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)].Round(time.Millisecond)
}

func nemesisReport(rounds int, took time.Duration, ticks, streams int, ttl time.Duration, runs int, rep effectReport, violations, stalls int, fig map[faultKind]*failoverFigures) string {
	var b bytes.Buffer
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "%d rounds in %v on 3 nodes, lease %v, %d streams; load average at the end: %s", rounds, took.Round(time.Second), ttl, streams, load)
	fmt.Fprintf(&b, "%d ticks acknowledged; %d effect runs: %d repeats explained by a fault of their first runner, %d retried in place near a fault, %d overlaps explained; %d violations (lost, duplicated, snapshot, effect, linearizability, stalls), of which %d rounds stalled\n\n",
		ticks, runs, rep.Repeats, rep.Retried, rep.Overlaps, violations, stalls)
	b.WriteString("| fault | rounds | moved streams | failover p50 | p99 | max | resumed streams | resume p50 | p99 | max |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range nemesisKinds {
		f := fig[k]
		if f == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %v | %v | %v | %d | %v | %v | %v |\n", k, f.faults,
			len(f.failover), percentile(f.failover, 50), percentile(f.failover, 99), maxDur0(f.failover),
			len(f.resume), percentile(f.resume, 50), percentile(f.resume, 99), maxDur0(f.resume))
	}
	return b.String()
}

// ---- the plain streams ----------------------------------------------------------------------

// plainLoad is a round's Porcupine-checked workload on plain streams through the nodes.
type plainLoad struct {
	w    *history.Workload
	stop context.CancelFunc
	done chan struct{}
}

func startPlainLoad(t *testing.T, prefix string, nodes []*node) *plainLoad {
	t.Helper()
	var targets []string
	for _, nd := range nodes {
		targets = append(targets, nd.url()+"/v1/stream")
	}
	w := &history.Workload{Targets: targets, Prefix: "plain/" + prefix, Streams: 2, Writers: 1, Producers: 1, Readers: 1, Timeout: 3 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.Create(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	l := &plainLoad{w: w, stop: stop, done: make(chan struct{})}
	go func() { defer close(l.done); w.Run(lctx) }()
	t.Cleanup(func() { stop(); <-l.done })
	return l
}

// finish stops the clients, reads every stream once more and has the checker judge the history.
func (l *plainLoad) finish(t *testing.T) history.Result {
	t.Helper()
	l.stop()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.w.FinalReads(ctx); err != nil {
		t.Fatal(err)
	}
	r := history.Check(l.w.Rec.Operations(), 60*time.Second, os.TempDir())
	if r.Counts.Acknowledged == 0 {
		r.Verdict = porcupine.Unknown
		r.Explanation = "positive control: no append on the plain streams was acknowledged"
	}
	return r
}
