package host_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// The effect checker of the cluster tests (docs/reliability.md#how-the-tests-judge). The tests
// record every run of the external effect — which node incarnation ran it, under which lease
// generation, when its work began on the node and when the test's endpoint received it — and
// every fault they inject (a kill, a freeze, a graceful stop), with the time they injected it.
// The checker then decides, from those records alone, whether an effect ran twice or two nodes
// ran one stream at once. Nothing the nodes log enters into it: the system under test never
// explains its own failure.

// effectRun is one run of the external effect.
type effectRun struct {
	Key  string // what ran: the stream and the tick
	Path string // the stream
	Node string // the node incarnation ("n1#3")
	Gen  int64  // the lease generation it ran under
	// Start is when the node began the effect's work (its blocker), End when the test's endpoint
	// received the call.
	Start, End time.Time
}

// faultKind names a fault a test injects.
type faultKind string

const (
	faultKill   faultKind = "kill"   // SIGKILL
	faultFreeze faultKind = "freeze" // SIGSTOP, then SIGCONT
	faultTerm   faultKind = "term"   // SIGTERM (a graceful stop)
)

// injectedFault is a fault the test injected into one node incarnation: At is when the test
// sent the signal (recorded before sending it), Until when the fault ended (the SIGCONT of a
// freeze, the exit of a killed or stopped process).
type injectedFault struct {
	Node      string
	Kind      faultKind
	At, Until time.Time
}

// effectReport is what checkEffects found.
type effectReport struct {
	Violations []string
	// Repeats counts the runs of an effect after its first on another node, each explained by
	// an injected fault; Retried the runs again on the same node under the same lease, each
	// near an injected fault; Overlaps the overlapping runs of one stream on two nodes, each
	// explained by an injected fault.
	Repeats, Retried, Overlaps int
}

// checkEffects judges runs against the injected faults. bound is how long before a fault a run
// of its node may have begun and still count as in flight at it (the work since the last
// checkpoint, which a successor runs again).
//
//   - A repeat: the runs of one key are ordered by Start; every run after the first must be
//     explained by an earlier run of that key that was in flight at a fault of its incarnation
//     — it began before the fault ended and no more than bound before it began — and the
//     repeat began after the fault began, on another incarnation or under a newer lease
//     generation (the lease moved, and the next holder caught up from the checkpoint). A node's
//     own fault never explains its own repeat under the generation it ran before the fault, and
//     nothing explains a repeat no fault came before.
//   - Or by an earlier run begun while another node was frozen (from bound before the freeze to
//     its end), repeated under a newer generation: the frozen node held its streams' locks
//     until the database ended its session, the first runner's writes waited on them and failed,
//     and its lease moved on.
//   - A retry in place: a repeat on the incarnation and under the lease generation of every
//     earlier run of its key (nobody else ran it: the lease never moved) is the retry of work
//     whose write failed. It is accepted only near an injected fault, of any node (a frozen
//     node holds its streams' locks until the database ends its session, and the other nodes'
//     writes that wait on them fail): the first run began no earlier than bound before the
//     fault and no later than bound after its end, and the retry by 3×bound after its end.
//   - An overlap: each (incarnation, generation) ran a stream from its first run's Start to its
//     last run's End. Two of them on one stream overlap in time only when the earlier one's
//     incarnation had a fault that every run of it began no later than, within bound of each,
//     and the later one began after that fault.
//   - Generations: on one stream, ordered by Start, a run under a lower generation never begins
//     after one under a higher generation, and every run names its generation.
func checkEffects(runs []effectRun, faults []injectedFault, bound time.Duration) effectReport {
	var rep effectReport
	fail := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	byNode := map[string][]injectedFault{}
	for _, f := range faults {
		byNode[f.Node] = append(byNode[f.Node], f)
	}
	// inFlight reports whether work begun at start on the incarnation hit by f was in flight at
	// f: begun before the fault ended (a killed or frozen process begins nothing meanwhile; a
	// stopping one finishes the event in progress), and no more than bound before it began, not
	// counting the time other injected faults lasted meanwhile (a frozen node holds its streams'
	// locks until the database ends its session, and other nodes' writes to those streams wait:
	// their work since the last checkpoint stays in flight for as long).
	inFlight := func(start time.Time, f injectedFault) bool {
		if start.After(f.Until) {
			return false
		}
		return f.At.Sub(start)-stalledBy(faults, f, start, f.At) <= bound
	}
	// inFlightAt returns whether r was in flight at a fault of its incarnation that began by t.
	inFlightAt := func(r effectRun, t time.Time) bool {
		for _, f := range byNode[r.Node] {
			if inFlight(r.Start, f) && !t.Before(f.At) {
				return true
			}
		}
		return false
	}

	byKey := map[string][]effectRun{}
	byPath := map[string][]effectRun{}
	for _, r := range runs {
		byKey[r.Key] = append(byKey[r.Key], r)
		byPath[r.Path] = append(byPath[r.Path], r)
		if r.Gen == 0 {
			fail("%s: %s ran under no known lease generation", r.Key, r.Node)
		}
	}
	keys := sortedKeys(byKey)
	for _, k := range keys {
		rs := byKey[k]
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		for j := 1; j < len(rs); j++ {
			explained := false
			for _, r := range rs[:j] {
				if (r.Node != rs[j].Node || rs[j].Gen > r.Gen) && inFlightAt(r, rs[j].Start) {
					explained = true
					break
				}
				if rs[j].Gen > r.Gen && stalledAtFreeze(r, rs[j].Start, faults, bound) {
					explained = true
					break
				}
			}
			if !explained && retryInPlace(rs[:j+1], faults, bound) {
				rep.Retried++
				continue
			}
			if !explained {
				fail("%s: ran again on %s (generation %d, began %s) after %s; no fault the test injected explains it (faults: %s)",
					k, rs[j].Node, rs[j].Gen, stamp(rs[j].Start), describeRuns(rs[:j]), describeFaults(faults))
				continue
			}
			rep.Repeats++
		}
	}

	for _, p := range sortedKeys(byPath) {
		rs := byPath[p]
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		var maxGen int64
		var maxBy effectRun
		for _, r := range rs {
			if r.Gen != 0 && r.Gen < maxGen {
				fail("%s: %s ran under lease generation %d (began %s) after %s had run under %d (began %s)",
					p, r.Node, r.Gen, stamp(r.Start), maxBy.Node, maxGen, stamp(maxBy.Start))
			}
			if r.Gen > maxGen {
				maxGen, maxBy = r.Gen, r
			}
		}
		spans := runSpans(rs)
		for i := range spans {
			for j := i + 1; j < len(spans) && spans[j].from.Before(spans[i].to); j++ {
				a, b := spans[i], spans[j] // a began first; b began while a still ran
				explained := false
				for _, f := range byNode[a.node] {
					if a.node != b.node && inFlight(a.lastStart, f) && !b.from.Before(f.At) {
						explained = true
						break
					}
				}
				if !explained {
					fail("%s: %s ran it under generation %d (%s to %s) while %s ran it under generation %d (%s to %s); no fault the test injected explains it",
						p, b.node, b.gen, stamp(b.from), stamp(b.to), a.node, a.gen, stamp(a.from), stamp(a.to))
					continue
				}
				rep.Overlaps++
			}
		}
	}
	return rep
}

// stalledAtFreeze reports whether r began while another incarnation was frozen by the test (from
// bound before the freeze to its end), the freeze having begun by t.
func stalledAtFreeze(r effectRun, t time.Time, faults []injectedFault, bound time.Duration) bool {
	for _, f := range faults {
		if f.Kind == faultFreeze && f.Node != r.Node && !r.Start.Before(f.At.Add(-bound)) && !r.Start.After(f.Until) && !t.Before(f.At) {
			return true
		}
	}
	return false
}

// retryInPlace reports whether the last of rs (one key's runs, by Start) is a retry in place
// near an injected fault (see checkEffects).
func retryInPlace(rs []effectRun, faults []injectedFault, bound time.Duration) bool {
	last := rs[len(rs)-1]
	for _, r := range rs {
		if r.Node != last.Node || r.Gen != last.Gen {
			return false
		}
	}
	first := rs[0].Start
	for _, f := range faults {
		if !first.Before(f.At.Add(-bound)) && !first.After(f.Until.Add(bound)) && !last.Start.After(f.Until.Add(3*bound)) {
			return true
		}
	}
	return false
}

// stalledBy returns how much of [from, to] the injected faults other than f covered.
func stalledBy(faults []injectedFault, f injectedFault, from, to time.Time) time.Duration {
	var ws [][2]time.Time
	for _, g := range faults {
		if g == f {
			continue
		}
		lo, hi := g.At, g.Until
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			ws = append(ws, [2]time.Time{lo, hi})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i][0].Before(ws[j][0]) })
	var d time.Duration
	cut := from
	for _, w := range ws {
		lo := w[0]
		if lo.Before(cut) {
			lo = cut
		}
		if w[1].After(lo) {
			d += w[1].Sub(lo)
			cut = w[1]
		}
	}
	return d
}

// span is one (incarnation, generation) running a stream: from its first run's Start to its
// last run's End; lastStart is its last run's Start.
type span struct {
	node      string
	gen       int64
	from, to  time.Time
	lastStart time.Time
}

func runSpans(rs []effectRun) []span {
	type key struct {
		node string
		gen  int64
	}
	by := map[key]*span{}
	var order []key
	for _, r := range rs {
		k := key{r.Node, r.Gen}
		s := by[k]
		if s == nil {
			s = &span{node: r.Node, gen: r.Gen, from: r.Start, to: r.End, lastStart: r.Start}
			by[k] = s
			order = append(order, k)
		}
		if r.Start.Before(s.from) {
			s.from = r.Start
		}
		if r.End.After(s.to) {
			s.to = r.End
		}
		if r.Start.After(s.lastStart) {
			s.lastStart = r.Start
		}
	}
	out := make([]span, 0, len(order))
	for _, k := range order {
		out = append(out, *by[k])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].from.Before(out[j].from) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func stamp(t time.Time) string { return t.Format("15:04:05.000000") }

func describeRuns(rs []effectRun) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (generation %d, %s to %s)", r.Node, r.Gen, stamp(r.Start), stamp(r.End))
	}
	return b.String()
}

func describeFaults(fs []injectedFault) string {
	if len(fs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s of %s at %s until %s", f.Kind, f.Node, stamp(f.At), stamp(f.Until))
	}
	return b.String()
}

// TestEffectCheckerRejectsEveryHistoryNoInjectedFaultExplains is the checker's positive control:
// made-up histories, each with one fault of its own, that it must reject — and the history of a
// kill that it must accept, so it is not rejecting everything.
func TestEffectCheckerRejectsEveryHistoryNoInjectedFaultExplains(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const bound = 6 * time.Second
	run := func(node string, gen int64, tick, startMs, endMs int) effectRun {
		return effectRun{Key: fmt.Sprintf("/s#%d", tick), Path: "/s", Node: node, Gen: gen, Start: at(startMs), End: at(endMs)}
	}
	killA := injectedFault{Node: "a#1", Kind: faultKill, At: at(1000), Until: at(1010)}
	freezeA := injectedFault{Node: "a#1", Kind: faultFreeze, At: at(1000), Until: at(9000)}
	cases := []struct {
		name   string
		runs   []effectRun
		faults []injectedFault
		accept bool
	}{
		{"a kill explains the repeat of the effect in flight at it", []effectRun{
			run("a#1", 1, 0, 0, 10), run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 3000, 3010), run("b#1", 2, 2, 3100, 3110),
		}, []injectedFault{killA}, true},
		{"a repeat with no fault", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 3000, 3010),
		}, nil, false},
		{"a repeat by the same node, no fault", []effectRun{
			run("a#1", 1, 1, 900, 910), run("a#1", 1, 1, 950, 960),
		}, nil, false},
		{"a repeat by the same node far from any fault", []effectRun{
			run("a#1", 1, 1, 900, 910), run("a#1", 1, 1, 950, 960),
		}, []injectedFault{{Node: "c#1", Kind: faultFreeze, At: at(10000), Until: at(16000)}}, false},
		{"a retry by the same node long after a fault", []effectRun{
			run("a#1", 1, 1, 900, 910), run("a#1", 1, 1, 950+4*int(bound/time.Millisecond), 960+4*int(bound/time.Millisecond)),
		}, []injectedFault{{Node: "c#1", Kind: faultFreeze, At: at(500), Until: at(1000)}}, false},
		{"a repeat by the same node after another ran it", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 2000, 2010), run("a#1", 1, 1, 2950, 2960),
		}, []injectedFault{killA}, false},
		{"a repeat after a fault of another node", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 3000, 3010),
		}, []injectedFault{{Node: "c#1", Kind: faultKill, At: at(1000), Until: at(1010)}}, false},
		{"a repeat whose first run began more than the bound before the fault", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "a#1", Kind: faultKill, At: at(900 + int(bound/time.Millisecond) + 1), Until: at(8000)}}, false},
		{"a frozen node that woke and ran again what its successor ran", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 3000, 3010), run("b#1", 2, 2, 3100, 3110), run("a#1", 1, 2, 9005, 9010),
		}, []injectedFault{freezeA}, false},
		{"a repeat begun before the fault that explains nothing yet", []effectRun{
			run("a#1", 1, 1, 500, 510), run("b#1", 2, 1, 800, 810),
		}, []injectedFault{killA}, false},
		{"two nodes running one stream at once", []effectRun{
			run("a#1", 1, 1, 0, 10), run("b#1", 2, 2, 500, 510), run("a#1", 1, 3, 1000, 1010),
		}, nil, false},
		{"an overlap with the earlier node's run begun after its fault", []effectRun{
			run("a#1", 1, 1, 0, 10), run("b#1", 2, 2, 3000, 3010), run("a#1", 1, 3, 9005, 9010),
		}, []injectedFault{freezeA}, false},
		{"a repeat whose first run began more than the bound before the fault, less another fault's length", []effectRun{
			run("a#1", 1, 1, 0, 10), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultKill, At: at(1000), Until: at(2000)},
			{Node: "a#1", Kind: faultKill, At: at(int(bound/time.Millisecond) + 1000), Until: at(8000)}}, true},
		{"a repeat whose first run began more than the bound before the fault, even less another fault's length", []effectRun{
			run("a#1", 1, 1, 0, 10), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultKill, At: at(1000), Until: at(2000)},
			{Node: "a#1", Kind: faultKill, At: at(int(bound/time.Millisecond) + 1001), Until: at(8000)}}, false},
		{"a retry by the same node under the same lease near a freeze of another", []effectRun{
			run("a#1", 1, 1, 900, 910), run("a#1", 1, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultFreeze, At: at(500), Until: at(6500)}}, true},
		{"a graceful stop explains the repeat of the event it was finishing", []effectRun{
			run("a#1", 1, 1, 1005, 1010), run("b#1", 2, 1, 3000, 3010),
		}, []injectedFault{{Node: "a#1", Kind: faultTerm, At: at(1000), Until: at(1500)}}, true},
		{"a run begun after a graceful stop ended", []effectRun{
			run("a#1", 1, 1, 1505, 1510), run("b#1", 2, 1, 3000, 3010),
		}, []injectedFault{{Node: "a#1", Kind: faultTerm, At: at(1000), Until: at(1500)}}, false},
		{"a node taking its stream back after its freeze runs the work in flight at it again", []effectRun{
			run("a#1", 1, 1, 900, 910), run("a#1", 3, 1, 9005, 9010),
		}, []injectedFault{freezeA}, true},
		{"a run stalled by another node's freeze, repeated by the next holder", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultFreeze, At: at(1000), Until: at(7000)}}, true},
		{"a run near another node's kill, repeated by the next holder", []effectRun{
			run("a#1", 1, 1, 900, 910), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultKill, At: at(1000), Until: at(1010)}}, false},
		{"a run begun after another node's freeze ended, repeated by the next holder", []effectRun{
			run("a#1", 1, 1, 7100, 7110), run("b#1", 2, 1, 9000, 9010),
		}, []injectedFault{{Node: "c#1", Kind: faultFreeze, At: at(1000), Until: at(7000)}}, false},
		{"the history of a woken node before the fix (two freezes, times as recorded)", []effectRun{
			run("n1#1", 2, 24, 9164, 9178), run("n0#1", 3, 24, 13954, 13956), run("n1#1", 2, 24, 18511, 18521),
		}, []injectedFault{{Node: "n0#1", Kind: faultFreeze, At: at(1930), Until: at(7935)},
			{Node: "n1#1", Kind: faultFreeze, At: at(11936), Until: at(17941)}}, false},
		{"a lower generation after a higher one", []effectRun{
			run("b#1", 2, 1, 0, 10), run("a#1", 1, 2, 100, 110),
		}, nil, false},
		{"a run under no generation", []effectRun{run("a#1", 0, 1, 0, 10)}, nil, false},
	}
	for _, c := range cases {
		rep := checkEffects(c.runs, c.faults, bound)
		if c.accept && len(rep.Violations) > 0 {
			t.Errorf("%s: rejected: %v", c.name, rep.Violations)
		}
		if !c.accept && len(rep.Violations) == 0 {
			t.Errorf("%s: accepted (%d repeats, %d overlaps explained)", c.name, rep.Repeats, rep.Overlaps)
		}
		if c.accept && rep.Repeats+rep.Retried != 1 {
			t.Errorf("%s: %d repeats and %d retries counted, want 1", c.name, rep.Repeats, rep.Retried)
		}
	}
}
