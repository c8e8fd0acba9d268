// The processor contract's acceptance cases for the engine (P-xx, R-xx;
// docs/engine.md#acceptance-cases) and the engine rules they exercise
// (docs/engine.md#engine-rules). Re-reduce, live state, claims, checkpoints, contracts and the
// engine's lifecycle have files of their own.
package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// Acceptance case P-08 (docs/engine.md#acceptance-cases).
func TestEventsRunOneAtATimeBehindTheirBlockers(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	for range 3 {
		appendT(t, mem, ev(tickType))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1", "start 2", "start 3"})
	tr := c.trace.get()
	var dones []string
	for _, s := range tr {
		if strings.HasPrefix(s, "blocked-done") {
			dones = append(dones, s)
		}
	}
	eq(t, "dones", dones, []string{"blocked-done 1", "blocked-done 2", "blocked-done 3"})
	for n := 1; n < 3; n++ {
		if slices.Index(tr, fmt.Sprintf("start %d", n+1)) < slices.Index(tr, fmt.Sprintf("blocked-done %d", n)) {
			t.Errorf("start %d before blocked-done %d: %v", n+1, n, tr)
		}
	}
}

// Acceptance case P-09 (docs/engine.md#acceptance-cases).
func TestBackgroundIsNotAwaited(t *testing.T) {
	t.Parallel()
	order := &rec[string]{}
	release, bg2Done := make(chan struct{}), make(chan struct{})
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "bg", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			off := a.Event.Offset
			order.add(fmt.Sprintf("fg %d", off))
			a.RunInBackground(func(context.Context) error {
				<-release
				if off == 1 {
					<-bg2Done // attempt 2 overtakes attempt 1: attempts are not run one after another
				}
				order.add(fmt.Sprintf("bg %d", off))
				if off == 2 {
					close(bg2Done)
				}
				return nil
			})
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	appendT(t, mem, ev("e"), ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t))) // returns while both attempts are still blocked
	eq(t, "foreground", order.get(), []string{"fg 1", "fg 2"})
	close(release)
	drain(t, eng)
	eq(t, "background", order.get()[2:], []string{"bg 2", "bg 1"})
}

// Acceptance case P-10 (docs/engine.md#acceptance-cases).
func TestOneCommitPerBatch(t *testing.T) {
	t.Parallel()
	_, mem, cps, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType), ev(tickType), ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "writes", cps.Writes(), 2)
}

// Acceptance case P-11 (docs/engine.md#acceptance-cases).
func TestAtHeadPassForUnconsumedEvent(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev("unrelated"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "trace", c.trace.get(), []string{"at-head ticks=0"})
}

// Acceptance case P-12 (docs/engine.md#acceptance-cases).
func TestCatchUpTwiceReducesOnce(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1"})
}

// Acceptance case P-13 (docs/engine.md#acceptance-cases).
func TestFailedPushPersistsNothingAndIsRetried(t *testing.T) {
	t.Parallel()
	type seen struct {
		Seen int `json:"seen"`
	}
	attempts := 0
	c := must[*foldstream.Contract[seen]](t)(foldstream.DefineContract(foldstream.ContractConfig[seen]{Slug: "flaky", Version: "1", Consumes: []string{"e"}}))
	p := &fn[seen]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[seen]) (seen, bool, error) { return seen{a.State.Seen + 1}, true, nil },
		process: func(a *foldstream.ProcessEventArgs[seen]) error {
			if a.Event == nil {
				return nil
			}
			a.BlockProcessorWhile(func(context.Context) error {
				attempts++
				if attempts == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[seen](t, p, mem, cps)
	mem.Register(eng)
	appendT(t, mem, ev("e"))
	settle(t, mem)
	if _, ok := cps.Get("flaky"); ok {
		t.Fatal("a checkpoint row exists after the failed push")
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "attempts", attempts, 2)
	eq(t, "state", must[foldstream.Snapshot[seen]](t)(eng.Snapshot(ctxFor(t))).State, seen{1})
}

// Acceptance case P-14 (docs/engine.md#acceptance-cases).
func TestContiguousPushReadsNothing(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1"})
	eq(t, "reads", mem.Reads(), 0)
}

// Acceptance case P-15 (docs/engine.md#acceptance-cases).
func TestGappedPushRepairsFromTheLog(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	appendT(t, mem, ev(tickType))
	eng := newEngine[counterState](t, c, mem, cps)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1", "start 2"})
	if mem.Reads() == 0 {
		t.Error("reads == 0: the gap was not repaired from the log")
	}
}

// Acceptance case P-16 (docs/engine.md#acceptance-cases).
func TestStalePushReducesNothing(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctx))
	mustDo(t, eng.ProcessEventBatch(ctx, nil, foldstream.ScannedRange{After: 0, Through: 1}))
	eq(t, "starts", c.starts(), []string{"start 1"})
}

// Acceptance case P-17 (docs/engine.md#acceptance-cases).
func TestBackToBackPushesDeliverOneCaughtUp(t *testing.T) {
	t.Parallel()
	p := newProbe(t)
	// Hold the chain busy in a catch-up read, so both pushes are queued before the first runs
	// (the rule is about two pushes queued before either runs).
	entered, release := make(chan struct{}), make(chan struct{})
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) {
		close(entered)
		<-release
		return foldstream.ReadPage{AtHead: true}, nil
	}}
	eng := newEngine[nState](t, p, st, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	catchUp := make(chan error, 1)
	go func() { catchUp <- eng.CatchUpFromLog(ctx) }()
	<-entered
	w1 := eng.QueueEventBatch(ctx, []foldstream.Event{committed(1, "a")}, foldstream.ScannedRange{After: 0, Through: 1})
	w2 := eng.QueueEventBatch(ctx, []foldstream.Event{committed(2, "a")}, foldstream.ScannedRange{After: 1, Through: 2})
	close(release)
	mustDo(t, <-catchUp)
	mustDo(t, w1(ctx))
	mustDo(t, w2(ctx))
	eq(t, "caughtUps", p.count(), 1)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).State, nState{2})
}

// Acceptance case P-18 (docs/engine.md#acceptance-cases).
func TestOnePushDeliversCaughtUp(t *testing.T) {
	t.Parallel()
	p := newProbe(t)
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	mustDo(t, eng.ProcessEventBatch(ctxFor(t), []foldstream.Event{committed(1, "a")}, foldstream.ScannedRange{After: 0, Through: 1}))
	eq(t, "caughtUps", p.count(), 1)
}

// Acceptance case P-19 (docs/engine.md#acceptance-cases).
func TestFedEngineReadsTheLogOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fedAndRow bool
		reads     int
	}{{"fed and row-pushed", true, 1}, {"not fed", false, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
			appendT(t, mem, ev("counted"))
			var mods []func(*foldstream.EngineConfig)
			if tc.fedAndRow {
				mods = append(mods, fed)
			}
			eng := newEngine[ledgerState](t, newLedger(t), mem, cps, mods...)
			if tc.fedAndRow {
				defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
			}
			ctx := ctxFor(t)
			for i := range 5 {
				appendT(t, mem, ev("noise"))
				s := must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
				eq(t, fmt.Sprintf("snapshot %d", i), s.State, ledgerState{Counted: []int64{1}})
			}
			eq(t, "reads", mem.Reads(), tc.reads)
		})
	}
}

// Acceptance case P-20 (docs/engine.md#acceptance-cases).
func TestSnapshotBeforeThePushRan(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	ledger := newLedger(t)
	release := make(chan struct{})
	ledger.process = func(a *foldstream.ProcessEventArgs[ledgerState]) error {
		if a.Event != nil && a.Event.Offset == 2 {
			a.BlockProcessorWhile(func(context.Context) error { <-release; return nil })
		}
		return nil
	}
	eng := newEngine[ledgerState](t, ledger, mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	eq(t, "empty", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{}})
	reads := mem.Reads()
	appendT(t, mem, ev("noise"), ev("counted"))
	// The push is held in its blocker, so the snapshot is issued before the push ran: it must
	// queue a catch-up behind it rather than answer the stale state.
	snap := make(chan foldstream.Snapshot[ledgerState], 1)
	go func() { s, _ := eng.Snapshot(ctx); snap <- s }()
	waitUntil(t, "the snapshot's catch-up is queued", func() bool { return eng.Pending() >= 2 }, eng.Changed)
	close(release)
	eq(t, "next", (<-snap).State, ledgerState{Counted: []int64{2}})
	eq(t, "extra reads", mem.Reads()-reads, 1)
	settle(t, mem)
	got := appendT(t, mem, ev("counted"))
	eq(t, "offset of the third append (the delta took 3)", got[0].Offset, int64(4))
	settle(t, mem)
	reads = mem.Reads()
	eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{2, 4}})
	live := must[foldtype.LiveSnapshot[json.RawMessage]](t)(eng.LiveSnapshot(ctx))
	jsonEq(t, "live", live.State, `{"counted":[2,4]}`)
	eq(t, "no further read", mem.Reads(), reads)
}

// Acceptance case P-21 (docs/engine.md#acceptance-cases).
func TestSnapshotBehindASlowPush(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t, 1), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
	appendT(t, mem, ev("counted"))
	appendT(t, mem, ev("counted"))
	eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{1, 2}})
	settle(t, mem)
	eq(t, "later", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{1, 2}})
}

// Acceptance case P-22 (docs/engine.md#acceptance-cases).
func TestSnapshotsArePrefixesAndComplete(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t, 4, 10), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	var counted []int64
	for i := 1; i <= 24; i++ {
		typ := "counted"
		if i%3 == 0 {
			typ = "noise"
		}
		got := appendT(t, mem, ev(typ))
		if typ == "counted" {
			counted = append(counted, got[0].Offset)
		}
		if i%2 == 0 {
			s := must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State.Counted
			if len(s) < len(counted) || !slices.Equal(s[:len(counted)], counted) || len(s) > len(counted) {
				t.Fatalf("after append %d: snapshot %v, want exactly the counted offsets %v", i, s, counted)
			}
		}
		if i%5 == 0 {
			settle(t, mem)
		}
	}
	settle(t, mem)
	eq(t, "final", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State.Counted, counted)
}

// Acceptance case P-24 (docs/engine.md#acceptance-cases).
func TestAtHeadJudgedAgainstPushesOnly(t *testing.T) {
	t.Parallel()
	for _, isFed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fed=%v", isFed), func(t *testing.T) {
			t.Parallel()
			st := &stubStream{read: func(after int64, _ int) (foldstream.ReadPage, error) {
				var evs []foldstream.Event
				for o := after + 1; o <= 3; o++ {
					evs = append(evs, committed(o, "a"))
				}
				return foldstream.ReadPage{Events: evs, ScannedThroughOffset: 3, AtHead: true}, nil
			}}
			p := newProbe(t)
			eng := newEngine[nState](t, p, st, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) { c.FedByPushes = isFed })
			ctx := ctxFor(t)
			must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx))
			mustDo(t, eng.ProcessEventBatch(ctx, []foldstream.Event{committed(2, "a")}, foldstream.ScannedRange{After: 1, Through: 2}))
			eq(t, "caughtUps", p.count(), 2)
		})
	}
}

// Acceptance case P-25 (docs/engine.md#acceptance-cases).
func TestEphemeralsOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	cpsE, cpsS := testsupport.MemoryCheckpoints(), testsupport.MemoryCheckpoints()
	e := newEngine[seenState](t, newEph(t, "eph", "loud", "chunk"), mem, cpsE)
	s := newEngine[seenState](t, newEph(t, "star", "*"), mem, cpsS)
	mem.Register(e)
	mem.Register(s)
	ctx := ctxFor(t)
	appendT(t, mem, ev("loud"))
	settle(t, mem)
	we, ws := cpsE.Writes(), cpsS.Writes()
	appendT(t, mem, eph("chunk"))
	appendT(t, mem, eph("chunk"))
	settle(t, mem)
	eq(t, "eph", must[foldstream.Snapshot[seenState]](t)(e.Snapshot(ctx)).State.Seen, []string{"loud@1", "chunk@2", "chunk@3"})
	eq(t, "star", must[foldstream.Snapshot[seenState]](t)(s.Snapshot(ctx)).State.Seen, []string{"loud@1"})
	eq(t, "writes", []int{cpsE.Writes(), cpsS.Writes()}, []int{we, ws})
	appendT(t, mem, ev("loud"))
	settle(t, mem)
	eq(t, "star", must[foldstream.Snapshot[seenState]](t)(s.Snapshot(ctx)).State.Seen, []string{"loud@1", "loud@4"})
}

// Acceptance case P-26 (docs/engine.md#acceptance-cases).
func TestPushBehindTheCursorStillDeliversEphemerals(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	e := newEngine[seenState](t, newEph(t, "eph", "loud", "chunk"), mem, cps)
	ctx := ctxFor(t)
	appendT(t, mem, ev("loud"))
	mustDo(t, e.CatchUpFromLog(ctx))
	evs := appendT(t, mem, ev("loud"), eph("chunk"))
	mustDo(t, e.WaitUntilProcessed(ctx, 3, 2*time.Second))
	mustDo(t, e.ProcessEventBatch(ctx, evs, foldstream.ScannedRange{After: 1, Through: 3}))
	eq(t, "state", must[foldstream.Snapshot[seenState]](t)(e.Snapshot(ctx)).State.Seen, []string{"loud@1", "loud@2", "chunk@3"})
}

// Acceptance case P-27 (docs/engine.md#acceptance-cases).
func TestAppendInsideABlockerDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "echoer", Version: "1", Consumes: []string{"ping"}, Emits: []string{"echoed"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				_, err := a.Append(ctx, foldstream.EventInput{Type: "echoed", IdempotencyKey: "once"})
				return err
			})
		}
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("ping"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mustDo(t, mem.WaitIdle(ctx))
	if len(mem.EventsOfType("echoed")) != 1 {
		t.Fatalf("echoed not in the log: %v", mem.Events())
	}
}

// Acceptance case P-29 (docs/engine.md#acceptance-cases).
func TestMilestoneEmittedOnceWithProvenance(t *testing.T) {
	t.Parallel()
	_, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType), ev(tickType), ev(tickType), ev(tickType))
	ctx := ctxFor(t)
	mustDo(t, eng.CatchUpFromLog(ctx))
	settle(t, mem)
	ms := mem.EventsOfType(milestoneType)
	if len(ms) != 1 {
		t.Fatalf("milestones: got %d, want 1", len(ms))
	}
	jsonEq(t, "payload", ms[0].Payload, `{"at":3}`)
	src := ms[0].Source
	if src == nil || src.Processor == nil || src.Processor.Slug != "counter" || src.Processor.Version != "1.0.0" ||
		src.Processor.WhileProcessing == nil || src.Processor.WhileProcessing.Offset != 3 || src.Processor.WhileProcessing.Type != tickType {
		t.Errorf("source: got %+v", src)
	}
	mustDo(t, eng.CatchUpFromLog(ctx))
	settle(t, mem)
	eq(t, "milestones after a second catch-up", len(mem.EventsOfType(milestoneType)), 1)
}

// Acceptance case P-30 (docs/engine.md#acceptance-cases).
func TestUndeclaredEmitFailsTheBatch(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{Slug: "rogue", Version: "1"}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				_, err := a.Append(ctx, ev("ok"), ev("not-declared"))
				return err
			})
		}
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("x"))
	err := eng.CatchUpFromLog(ctxFor(t))
	if err == nil || err.Error() != `processor "rogue" emits "ok" without declaring it` {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, foldtype.ErrUndeclaredEmit) {
		t.Errorf("code %q", foldtype.CodeOf(err))
	}
	eq(t, "nothing appended", len(mem.Events()), 1)
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(0))
}

// Acceptance case P-31 (docs/engine.md#acceptance-cases).
func TestWaitUntilProcessedSucceedsOnceTheCursorIsThere(t *testing.T) {
	t.Parallel()
	_, mem, _, eng := setupCounter(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.WaitUntilProcessed(ctxFor(t), 1, time.Second))
}

// Acceptance case P-45 (docs/engine.md#acceptance-cases).
func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	p, _ := newCount(t, "1.0.0")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[ticksState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("tick"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	err := eng.WaitUntilProcessed(ctxFor(t), 5, 120*time.Millisecond)
	if err == nil || err.Error() != `processor "count" did not reach offset 5 in 120ms` {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, foldtype.ErrProcessTimeout) {
		t.Errorf("code %q", foldtype.CodeOf(err))
	}
}

// Acceptance case P-46 (docs/engine.md#acceptance-cases).
func TestWaitFailsPromptlyWithTheCatchUpError(t *testing.T) {
	t.Parallel()
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) {
		return foldstream.ReadPage{}, errors.New("self-pull read failed: boom")
	}}
	eng := newEngine[nState](t, newProbe(t), st, testsupport.MemoryCheckpoints())
	start := time.Now()
	err := eng.WaitUntilProcessed(ctxFor(t), 5, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v, want the read failure", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v: not prompt", d)
	}
}

// docs/engine.md#committing-a-range: if the last consumable event of an at-head range is skipped
// as malformed, caughtUp counts as not delivered, so the eventless pass runs.
func TestMalformedLastEventStillGetsTheAtHeadPass(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[nState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nState]{
		Slug: "strict", Version: "1", Consumes: []string{"demo/set"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[setPayload]("demo/set", "")}}))
	deliveries := &rec[string]{}
	p := &fn[nState]{Base: foldstream.NewBase(c), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			d := delivery{CaughtUp: a.Delivery.CaughtUp}
			if a.Event != nil {
				off := a.Event.Offset
				d.Offset = &off
			}
			deliveries.add(d.String())
			return nil
		}}
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	good := committed(1, "demo/set")
	good.Payload = json.RawMessage(`{"n":1}`)
	bad := committed(2, "demo/set")
	bad.Payload = json.RawMessage(`{"n":"x"}`)
	pushT(t, eng, []foldstream.Event{good, bad}, 0, 2)
	eq(t, "deliveries", deliveries.get(), []string{"{1 false}", "{null true}"})
}

// docs/engine.md#the-latch: a failed unit does not wedge the chain; the caller of the failed unit
// still sees it. docs/engine.md#blockers: a failure raised directly by ProcessEvent (error or
// panic) fails the batch.
func TestProcessEventFailureFailsTheBatchButNotTheChain(t *testing.T) {
	t.Parallel()
	calls := 0
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "direct", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			calls++
			switch calls {
			case 1:
				return errors.New("direct failure")
			case 2:
				panic("direct panic")
			}
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	appendT(t, mem, ev("e"))
	ctx := ctxFor(t)
	if err := eng.CatchUpFromLog(ctx); err == nil || err.Error() != "direct failure" {
		t.Fatalf("first: %v", err)
	}
	if err := eng.CatchUpFromLog(ctx); err == nil {
		t.Fatal("second: a panicking ProcessEvent did not fail the batch")
	}
	eq(t, "writes", cps.Writes(), 0)
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)), foldstream.Snapshot[nState]{Offset: 1, State: nState{1}})
}

// docs/engine.md#emitting-events: in the eventless pass the stamped provenance omits
// whileProcessing; an append whose failure nobody awaits does not fail the batch.
func TestEventlessEmitProvenance(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "pinger", Version: "3", Consumes: []string{"go"}, Emits: []string{"pinged"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			_, err := a.Append(a.Context(), foldstream.EventInput{Type: "pinged", Source: &foldtype.Source{Grant: "forged"}, IdempotencyKey: "p"})
			_, _ = a.Append(a.Context(), foldstream.EventInput{Type: "undeclared"}) // unawaited failure
			return err
		}
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("noise"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	got := mem.EventsOfType("pinged")
	if len(got) != 1 {
		t.Fatalf("pinged: %d", len(got))
	}
	// No cause in an eventless pass; the stream stamps the origin (docs/engine.md#cause-chains).
	eq(t, "source", *got[0].Source, foldtype.Source{Processor: &foldtype.ProcessorSource{Slug: "pinger", Version: "3"}, Origin: "/"})
	if slices.ContainsFunc(mem.Events(), func(e foldstream.Event) bool { return e.Type == "undeclared" }) {
		t.Error("an undeclared type was appended")
	}
}

// The non-generic Runner view a host holds.
func TestRunnerView(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	var r foldtype.Runner = newEngine[tallyState](t, newTally(t), mem, testsupport.MemoryCheckpoints())
	mem.Register(r)
	eq(t, "slug", r.Slug(), "tally")
	eq(t, "consumes", r.Consumes(), []string{"tick"})
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ctx := ctxFor(t)
	snap, err := r.SnapshotJSON(ctx)
	mustDo(t, err)
	eq(t, "offset", snap.Offset, int64(2)) // the delta@2 push moved the in-memory cursor
	jsonEq(t, "state", snap.State, `{"count":1,"secret":"hidden"}`)
	live, err := r.LiveSnapshot(ctx)
	mustDo(t, err)
	jsonEq(t, "live", live.State, `{"count":1}`)
	eq(t, "cursor", r.ReducedThroughOffset(), int64(2)) // the delta's push moved it over offset 2
	mustDo(t, r.WaitUntilProcessed(ctx, 2, 0))
	r.PublishLiveState() // nothing changed: no delta
	settle(t, mem)
	eq(t, "deltas", len(deltas(mem)), 1)
	if _, err := foldstream.NewEngine[tallyState](newTally(t), foldstream.EngineConfig{}); !errors.Is(err, foldtype.ErrInvalidContract) {
		t.Errorf("missing dependencies: got %v", err)
	}
}

// docs/engine.md#errors-and-reporting: the reporter must never fail its caller, even when it
// panics.
func TestPanickingReporterNeverFailsTheEngine(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "loud", "1", "e")), project: projectNull[nState],
		reduce: func(foldstream.ReduceArgs[nState]) (nState, bool, error) {
			return nState{}, false, errors.New("reduce failed")
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) {
		c.Reporter = foldstream.ReporterFunc(func(context.Context, string, error, ...slog.Attr) { panic("reporter exploded") })
	})
	appendT(t, mem, ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(1))
}

// Acceptance case R-01 (docs/engine.md#acceptance-cases).
func TestBlockerFinishesBeforeNextEvent(t *testing.T) {
	t.Parallel()
	type span struct{ start, done time.Time }
	spans := &rec[span]{}
	starts := &rec[time.Time]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r01", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			starts.add(time.Now())
			a.BlockProcessorWhile(func(context.Context) error {
				s := time.Now()
				time.Sleep(30 * time.Millisecond)
				spans.add(span{s, time.Now()})
				return nil
			})
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("e"), ev("e"), ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	sp, st := spans.get(), starts.get()
	if len(sp) != 3 || len(st) != 3 {
		t.Fatalf("got %d spans, %d starts", len(sp), len(st))
	}
	for i := 0; i < 2; i++ {
		if st[i+1].Before(sp[i].done) {
			t.Errorf("processEvent %d started before blocker %d finished", i+2, i+1)
		}
	}
}

// Acceptance case R-02 (docs/engine.md#acceptance-cases).
func TestNestedBlockerHoldsTheEvent(t *testing.T) {
	t.Parallel()
	tr := &rec[string]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r02", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			off := a.Event.Offset
			tr.add(fmt.Sprintf("start %d", off))
			a.BlockProcessorWhile(func(context.Context) error {
				a.BlockProcessorWhile(func(context.Context) error {
					time.Sleep(40 * time.Millisecond)
					tr.add(fmt.Sprintf("nested-done %d", off))
					return nil
				})
				return nil
			})
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("e"), ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "trace", tr.get(), []string{"start 1", "nested-done 1", "start 2", "nested-done 2"})
}

// Acceptance case R-03 (docs/engine.md#acceptance-cases).
func TestBackgroundFailureDoesNotFailTheBatch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var bgDone atomic.Bool
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r03", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil && a.Event.Offset == 1 {
				a.RunInBackground(func(context.Context) error {
					<-release
					bgDone.Store(true)
					return errors.New("background step failed")
				})
			}
			return nil
		}}
	cps := testsupport.MemoryCheckpoints()
	sites := &siteLog{}
	eng := newEngine[nState](t, p, &stubStream{}, cps, func(c *foldstream.EngineConfig) { c.Reporter = sites })
	ctx := ctxFor(t)
	mustDo(t, eng.ProcessEventBatch(ctx, []foldstream.Event{committed(1, "e")}, foldstream.ScannedRange{After: 0, Through: 1}))
	if bgDone.Load() {
		t.Fatal("the push waited for the background step")
	}
	cp, _ := cps.Get("r03")
	eq(t, "checkpoint", cp.ReducedThroughOffset, int64(1))
	close(release)
	drain(t, eng)
	if !bgDone.Load() {
		t.Fatal("the background step never ran")
	}
	if !slices.Contains(sites.get(), foldstream.SiteBackground) {
		t.Errorf("background failure not reported: %v", sites.get())
	}
	mustDo(t, eng.ProcessEventBatch(ctx, []foldstream.Event{committed(2, "e")}, foldstream.ScannedRange{After: 1, Through: 2}))
	eq(t, "offset", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).Offset, int64(2))
}

// Acceptance case R-04 (docs/engine.md#acceptance-cases).
func TestFailingReduceIsContained(t *testing.T) {
	t.Parallel()
	effects := &rec[int64]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r04", "1", "e")), project: projectNull[nState],
		reduce: func(a foldstream.ReduceArgs[nState]) (nState, bool, error) {
			if a.Event.Offset == 3 {
				panic("reduce exploded") // a panic is contained like an error
			}
			return nState{a.State.N + 1}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				effects.add(a.Event.Offset)
			}
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	sites := &siteLog{}
	eng := newEngine[nState](t, p, mem, cps, func(c *foldstream.EngineConfig) { c.Reporter = sites })
	appendT(t, mem, ev("e"), ev("e"), ev("e"))
	ctx := ctxFor(t)
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "writes", cps.Writes(), 1)
	eq(t, "effects", effects.get(), []int64{1, 2, 3})
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)), foldstream.Snapshot[nState]{Offset: 3, State: nState{2}})
	eq(t, "reported", sites.get(), []string{foldstream.SiteReduce})
}

// Acceptance case R-05 (docs/engine.md#acceptance-cases).
func TestFailedBlockerRetriesTheWholeBatch(t *testing.T) {
	t.Parallel()
	effects := &rec[int64]{}
	var failed atomic.Bool
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r05", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			effects.add(a.Event.Offset)
			if a.Event.Offset == 3 {
				a.BlockProcessorWhile(func(context.Context) error {
					if failed.CompareAndSwap(false, true) {
						return errors.New("boom")
					}
					return nil
				})
			}
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	evs := appendT(t, mem, ev("e"), ev("e"), ev("e"))
	ctx := ctxFor(t)
	err := eng.ProcessEventBatch(ctx, evs, foldstream.ScannedRange{After: 0, Through: 3})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("push: got %v, want boom", err)
	}
	eq(t, "writes", cps.Writes(), 0)
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(0))
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "effects", effects.get(), []int64{1, 2, 3, 1, 2, 3})
	eq(t, "writes", cps.Writes(), 1)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).State, nState{3})
}

// Acceptance case R-06 (docs/engine.md#acceptance-cases).
func TestCaughtUpOnTheLastConsumedEvent(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "rec", "tick")
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	pushT(t, eng, []foldstream.Event{committed(1, "tick"), committed(2, "noise")}, 0, 2)
	eq(t, "deliveries", deliveries.get(), []string{"{1 true}"})
}

// Acceptance case R-07 (docs/engine.md#acceptance-cases).
func TestEventlessPassWhenNothingConsumed(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "rec", "tick")
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	pushT(t, eng, []foldstream.Event{committed(1, "noise"), committed(2, "noise")}, 0, 2)
	eq(t, "deliveries", deliveries.get(), []string{"{null true}"})
}

// Acceptance case R-08 (docs/engine.md#acceptance-cases).
func TestFiveHundredEventsInOneAppendReachTheirOffsetCaughtUp(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "rec", "tick")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	in := make([]foldstream.EventInput, 500)
	for i := range in {
		in[i] = ev("tick")
	}
	appendT(t, mem, in...)
	ctx := ctxFor(t)
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "offset", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).Offset, int64(500))
	n := 0
	for _, d := range deliveries.get() {
		if strings.HasSuffix(d, "true}") {
			n++
		}
	}
	if n < 1 {
		t.Error("no caughtUp delivery")
	}
}

// Acceptance case R-09 (docs/engine.md#acceptance-cases).
func TestWaitCatchesUpUnpushedEvents(t *testing.T) {
	t.Parallel()
	p, _ := newRecorder(t, "rec", "tick")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("tick"), ev("tick"), ev("tick"))
	ctx := ctxFor(t)
	mustDo(t, eng.WaitUntilProcessed(ctx, 3, 2*time.Second))
	eq(t, "offset", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).Offset, int64(3))
}

// Acceptance case R-10 (docs/engine.md#acceptance-cases).
func TestWaitersTimeOutIndependently(t *testing.T) {
	t.Parallel()
	p, _ := newRecorder(t, "rec", "e")
	p.process = func(a *foldstream.ProcessEventArgs[nState]) error {
		if a.Event != nil && a.Event.Offset == 1 {
			a.BlockProcessorWhile(func(context.Context) error { time.Sleep(60 * time.Millisecond); return nil })
		}
		return nil
	}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("e"))
	appendT(t, mem, ev("e"))
	ctx := ctxFor(t)
	errs := make(chan error, 3)
	go func() { errs <- eng.WaitUntilProcessed(ctx, 999, 25*time.Millisecond) }()
	go func() { errs <- eng.WaitUntilProcessed(ctx, 1, 5*time.Second) }()
	go func() { errs <- eng.WaitUntilProcessed(ctx, 2, 5*time.Second) }()
	var failed, ok int
	for range 3 {
		if err := <-errs; err == nil {
			ok++
		} else if errors.Is(err, foldtype.ErrProcessTimeout) && strings.Contains(err.Error(), "offset 999 in 25ms") {
			failed++
		} else {
			t.Errorf("unexpected error %v", err)
		}
	}
	eq(t, "ok, failed", [2]int{ok, failed}, [2]int{2, 1})
	done := make(chan error, 1)
	go func() { done <- eng.WaitUntilProcessed(ctx, 3, 5*time.Second) }()
	appendT(t, mem, ev("e"))
	mustDo(t, <-done)
	settle(t, mem)
}

// tickThenTwoChunks runs p on a fresh memory stream over a tick and two ephemeral chunks, checks
// the chunks wrote no checkpoint, and stops pushing to the engine.
func tickThenTwoChunks(t *testing.T, p foldstream.Processor[nState]) (*testsupport.MemoryStream, *testsupport.Checkpoints, *foldstream.Engine[nState]) {
	t.Helper()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	w := cps.Writes()
	appendT(t, mem, eph("chunk"))
	appendT(t, mem, eph("chunk"))
	settle(t, mem)
	eq(t, "writes for chunks", cps.Writes(), w)
	mem.ClearEngines()
	return mem, cps, eng
}

// Acceptance case R-14 (docs/engine.md#acceptance-cases).
func TestEphemeralWindowRidesInMemory(t *testing.T) {
	t.Parallel()
	p, seen := newEphWindow(t, false)
	mem, _, eng := tickThenTwoChunks(t, p)
	evs := appendT(t, mem, ev("tick"))
	pushT(t, eng, evs, 1, 4)
	eq(t, "seen", seen.get(), []string{"tick@1", "chunk@2", "chunk@3", "tick@4"})
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[nState]{Offset: 4, State: nState{4}})
}

// Acceptance case R-15 (docs/engine.md#acceptance-cases).
func TestFreshEngineSkipsDeadEphemerals(t *testing.T) {
	t.Parallel()
	p, _ := newEphWindow(t, false)
	mem, cps, _ := tickThenTwoChunks(t, p)
	p2, seen2 := newEphWindow(t, false)
	eng2 := newEngine[nState](t, p2, mem, cps)
	mem.Register(eng2)
	reads := mem.Reads()
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "seen", seen2.get(), []string{"tick@4"})
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng2.Snapshot(ctxFor(t))), foldstream.Snapshot[nState]{Offset: 4, State: nState{2}})
	if mem.Reads() <= reads {
		t.Error("reads did not increase: the gap was not repaired from the log")
	}
}

// Acceptance case R-16 (docs/engine.md#acceptance-cases).
func TestRepairAfterAFailedPushKeepsTheEphemeral(t *testing.T) {
	t.Parallel()
	p, seen := newEphWindow(t, true)
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "cursor after the failed push", eng.ReducedThroughOffset(), int64(0))
	got := appendT(t, mem, eph("chunk"), ev("tick"))
	eq(t, "offsets", []int64{got[0].Offset, got[1].Offset}, []int64{2, 3})
	settle(t, mem)
	s := seen.get()
	for _, want := range []string{"tick@1", "chunk@2", "tick@3"} {
		if !slices.Contains(s, want) {
			t.Errorf("seen %v lacks %s", s, want)
		}
	}
}

// Acceptance case R-17 (docs/engine.md#acceptance-cases).
func TestStarProcessorNamingTheDeltaSeesDurablesAndThatTypeOnly(t *testing.T) {
	t.Parallel()
	seen := &rec[string]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r17", "1", "*", "chunk")), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				seen.add(fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))
			}
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick")) // @1; its delta takes @2
	settle(t, mem)
	// One call keeps the offsets deterministic (docs/engine.md#choices-and-their-reasons).
	appendT(t, mem, eph("chunk"), eph("noise"), ev("tock")) // @3, @4, @5
	settle(t, mem)
	if len(deltasFor(mem, "r17")) < 1 {
		t.Error("no delta")
	}
	eq(t, "seen", seen.get(), []string{"tick@1", "chunk@3", "tock@5"})
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))).State, nState{3})
}

// docs/engine.md#reading-the-state: on timeout the waiter is removed from the list (no leak); the
// same holds for a caller whose context ends, and for the prompt failure with the catch-up's error
// (step 3).
func TestTimedOutWaiterIsRemoved(t *testing.T) {
	t.Parallel()
	p, _ := newCount(t, "1.0.0")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[ticksState](t, p, mem, testsupport.MemoryCheckpoints())
	if err := eng.WaitUntilProcessed(ctxFor(t), 5, 30*time.Millisecond); err == nil {
		t.Fatal("no timeout")
	}
	eq(t, "waiters after timeout", eng.WaiterCount(), 0)
	ctx, cancel := context.WithTimeout(ctxFor(t), 30*time.Millisecond)
	defer cancel()
	if err := eng.WaitUntilProcessed(ctx, 5, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled wait: got %v", err)
	}
	eq(t, "waiters after cancel", eng.WaiterCount(), 0)
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) { return foldstream.ReadPage{}, errors.New("boom") }}
	eng2 := newEngine[nState](t, newProbe(t), st, testsupport.MemoryCheckpoints())
	if err := eng2.WaitUntilProcessed(ctxFor(t), 5, time.Minute); err == nil || err.Error() != "boom" {
		t.Fatalf("got %v, want the catch-up's own error", err)
	}
	eq(t, "waiters after catch-up failure", eng2.WaiterCount(), 0)
}

// docs/engine.md#pushes-and-gap-repair: no push is ever discarded. A push whose caller gave up
// (its context ended) while the push was still queued behind another unit must still run once its
// turn comes: its ephemerals ride exactly this push, and nothing would deliver them again.
func TestQueuedPushRunsAfterItsCallerGaveUp(t *testing.T) {
	t.Parallel()
	c := seenContract(t, "eph-cancel", "chunk")
	p := &fn[seenState]{Base: foldstream.NewBase(c), reduce: appendSeen, project: projectNull[seenState]}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) {
		once.Do(func() { close(entered) })
		<-release
		return foldstream.ReadPage{AtHead: true}, nil
	}}
	eng := newEngine[seenState](t, p, st, testsupport.MemoryCheckpoints())
	bg := ctxFor(t)
	catchUp := make(chan error, 1)
	go func() { catchUp <- eng.CatchUpFromLog(bg) }()
	<-entered
	ctx, cancel := context.WithCancel(bg)
	chunk := committed(1, "chunk")
	chunk.Ephemeral = true
	done := make(chan error, 1)
	go func() {
		done <- eng.ProcessEventBatch(ctx, []foldstream.Event{chunk}, foldstream.ScannedRange{After: 0, Through: 1})
	}()
	waitUntil(t, "the push is queued", func() bool { return eng.Pending() == 2 }, eng.Changed)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller: got %v, want context.Canceled", err)
	}
	close(release)
	mustDo(t, <-catchUp)
	drain(t, eng)
	eq(t, "state", must[foldstream.Snapshot[seenState]](t)(eng.Snapshot(bg)).State.Seen, []string{"chunk@1"})
}

// docs/engine.md#committing-a-range: an ephemeral-only range writes nothing, yet the in-memory
// cursor still moves to range.through (so a waiter on the ephemeral's offset resolves from the
// push).
func TestEphemeralOnlyRangeMovesTheInMemoryCursor(t *testing.T) {
	t.Parallel()
	c := seenContract(t, "eph-cursor", "loud", "chunk")
	p := &fn[seenState]{Base: foldstream.NewBase(c), reduce: appendSeen, project: projectNull[seenState]}
	cps := testsupport.MemoryCheckpoints()
	eng := newEngine[seenState](t, p, &stubStream{}, cps)
	pushT(t, eng, []foldstream.Event{committed(1, "loud")}, 0, 1)
	chunk := committed(2, "chunk")
	chunk.Ephemeral = true
	pushT(t, eng, []foldstream.Event{chunk}, 1, 2)
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(2))
	eq(t, "writes", cps.Writes(), 1)
	cp, _ := cps.Get("eph-cursor")
	eq(t, "stored cursor", cp.ReducedThroughOffset, int64(1))
	mustDo(t, eng.WaitUntilProcessed(ctxFor(t), 2, time.Second))
}

// docs/engine.md#pushes-and-gap-repair: gap repair reduces and commits with atHead false — repair
// never delivers caughtUp; only the pushed batch itself (at head) does.
func TestGapRepairNeverDeliversCaughtUp(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "repair", "tick")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	evs := appendT(t, mem, ev("tick"), ev("tick"), ev("tick"))
	pushT(t, eng, evs[2:], 2, 3)
	eq(t, "deliveries", deliveries.get(), []string{"{1 false}", "{2 false}", "{3 true}"})
}

// docs/engine.md#emitting-events: the emits check runs for every event before anything is
// appended, so one undeclared event anywhere in the call refuses the whole call (here the second
// of two).
func TestOneUndeclaredEmitRefusesTheWholeCall(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "half-rogue", Version: "1", Consumes: []string{"x"}, Emits: []string{"ok"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), project: projectNull[emptyState],
		process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
			if a.Event != nil {
				a.BlockProcessorWhile(func(ctx context.Context) error {
					_, err := a.Append(ctx, ev("ok"), ev(`bad "one"`))
					return err
				})
			}
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("x"))
	err := eng.CatchUpFromLog(ctxFor(t))
	if err == nil || err.Error() != `processor "half-rogue" emits "bad \"one\"" without declaring it` {
		t.Fatalf("got %v", err)
	}
	eq(t, "nothing appended", len(mem.PushedEvents()), 1)
}

// docs/engine.md#test-support: only durable events are registered by idempotency key in the memory
// stream; an ephemeral with a key neither dedupes nor conflicts.
func TestMemoryStreamRegistersOnlyDurablesByKey(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	e1 := appendT(t, mem, foldstream.EventInput{Type: "x", Ephemeral: true, IdempotencyKey: "k", Payload: json.RawMessage(`{"a":1}`)})
	e2 := appendT(t, mem, foldstream.EventInput{Type: "x", IdempotencyKey: "k", Payload: json.RawMessage(`{"a":2}`)})
	e3 := appendT(t, mem, foldstream.EventInput{Type: "x", IdempotencyKey: "k", Payload: json.RawMessage(`{"a":2}`)})
	e4 := appendT(t, mem, foldstream.EventInput{Type: "x", Ephemeral: true, IdempotencyKey: "k", Payload: json.RawMessage(`{"a":3}`)})
	eq(t, "offsets", []int64{e1[0].Offset, e2[0].Offset, e3[0].Offset, e4[0].Offset}, []int64{1, 2, 2, 3})
}

// docs/engine.md#pushes-and-gap-repair: against a real stream the read proof never passes the
// durable mark, so when the offsets below range.after were ephemerals the repair finds the log ran
// out (scannedThroughOffset <= cursor) and stops — it must not spin — and the push then commits.
func TestGapRepairStopsWhenTheLogRunsOutBelowAfter(t *testing.T) {
	t.Parallel()
	c := seenContract(t, "durable-mark", "tick")
	p := &fn[seenState]{Base: foldstream.NewBase(c), reduce: appendSeen, project: projectNull[seenState]}
	st := &stubStream{read: func(after int64, _ int) (foldstream.ReadPage, error) {
		page := foldstream.ReadPage{ScannedThroughOffset: max(after, 1), AtHead: true}
		if after < 1 {
			page.Events = []foldstream.Event{committed(1, "tick")}
		}
		return page, nil
	}}
	eng := newEngine[seenState](t, p, st, testsupport.MemoryCheckpoints())
	ctx, cancel := context.WithTimeout(ctxFor(t), 5*time.Second)
	defer cancel()
	mustDo(t, eng.ProcessEventBatch(ctx, []foldstream.Event{committed(4, "tick")}, foldstream.ScannedRange{After: 3, Through: 4}))
	eq(t, "reads", st.reads, 2)
	eq(t, "snapshot", must[foldstream.Snapshot[seenState]](t)(eng.Snapshot(ctx)),
		foldstream.Snapshot[seenState]{Offset: 4, State: seenState{Seen: []string{"tick@1", "tick@4"}}})
}
