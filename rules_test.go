package foldstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

func TestR01_BlockerFinishesBeforeNextEvent(t *testing.T) {
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

func TestR02_NestedBlockerHoldsTheEvent(t *testing.T) {
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

func TestR03_BackgroundFailureDoesNotFailTheBatch(t *testing.T) {
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

func TestR04_FailingReduceIsContained(t *testing.T) {
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

func TestR05_FailedBlockerRetriesTheWholeBatch(t *testing.T) {
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

func pushT(t *testing.T, r foldstream.Runner, evs []foldstream.Event, after, through int64) {
	t.Helper()
	mustDo(t, r.ProcessEventBatch(ctxFor(t), evs, foldstream.ScannedRange{After: after, Through: through}))
}

func TestR06_CaughtUpOnTheLastConsumedEvent(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "rec", "tick")
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	pushT(t, eng, []foldstream.Event{committed(1, "tick"), committed(2, "noise")}, 0, 2)
	eq(t, "deliveries", deliveries.get(), []string{"{1 true}"})
}

func TestR07_EventlessPassWhenNothingConsumed(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "rec", "tick")
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	pushT(t, eng, []foldstream.Event{committed(1, "noise"), committed(2, "noise")}, 0, 2)
	eq(t, "deliveries", deliveries.get(), []string{"{null true}"})
}

func TestR08_FullPageCatchUp(t *testing.T) {
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

func TestR09_WaitCatchesUpUnpushedEvents(t *testing.T) {
	t.Parallel()
	p, _ := newRecorder(t, "rec", "tick")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("tick"), ev("tick"), ev("tick"))
	ctx := ctxFor(t)
	mustDo(t, eng.WaitUntilProcessed(ctx, 3, 2*time.Second))
	eq(t, "offset", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).Offset, int64(3))
}

func TestR10_WaitersTimeOutIndependently(t *testing.T) {
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
		} else if errors.Is(err, foldstream.ErrProcessTimeout) && strings.Contains(err.Error(), "offset 999 in 25ms") {
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

func TestR11_ReReduceStopsAtTheOldCursor(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p1, effects := newVersioned(t, "1.0.0")
	v1 := newEngine[nState](t, p1, mem, cps)
	appendT(t, mem, ev("e"), ev("e"))
	ctx := ctxFor(t)
	mustDo(t, v1.CatchUpFromLog(ctx))
	evs := appendT(t, mem, ev("e"))
	p2, _ := newVersioned(t, "2.0.0")
	p2.process = p1.process // one effect log across versions
	v2 := newEngine[nState](t, p2, mem, cps)
	pushT(t, v2, evs, 2, 3)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)).State, nState{3})
	eq(t, "effects", effects.get(), []string{"effect 1", "effect 2", "effect 3"})
}

func TestR12_WaitRunsTheReReduce(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p1, effects := newVersioned(t, "1")
	v1 := newEngine[nState](t, p1, mem, cps)
	appendT(t, mem, ev("e"), ev("e"))
	ctx := ctxFor(t)
	mustDo(t, v1.CatchUpFromLog(ctx))
	p2, _ := newVersioned(t, "2")
	p2.process = p1.process
	v2 := newEngine[nState](t, p2, mem, cps)
	mustDo(t, v2.WaitUntilProcessed(ctx, 2, 2*time.Second))
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)).State, nState{2})
	eq(t, "effects", effects.get(), []string{"effect 1", "effect 2"})
}

func TestR13_FailingProjectionLosesOnlyThatNotification(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "r13", "1", "tick")), reduce: incN,
		project: func(s nState) (any, error) {
			if s.N == 1 {
				return nil, errors.New("projection failed")
			}
			return s, nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	ctx := ctxFor(t)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).State, nState{1})
	eq(t, "deltas", len(deltas(mem)), 0)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds := deltas(mem)
	if len(ds) != 1 {
		t.Fatalf("deltas: %d", len(ds))
	}
	eq(t, "patch", string(foldstream.JSON(ds[0].Patch)), `[{"op":"replace","path":"/n","value":2}]`)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds = deltas(mem)
	if len(ds) != 2 {
		t.Fatalf("deltas: %d", len(ds))
	}
	eq(t, "chain", ds[1].From, ds[0].To)
}

// ephWindow consumes tick and chunk; the state counts them; seen records what ProcessEvent saw.
func newEphWindow(t *testing.T, failFirst bool) (*fn[nState], *rec[string]) {
	seen := &rec[string]{}
	var failed atomic.Bool
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, "eph-window", "1", "tick", "chunk")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			seen.add(fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))
			if failFirst {
				a.BlockProcessorWhile(func(context.Context) error {
					if failed.CompareAndSwap(false, true) {
						return errors.New("first attempt fails")
					}
					return nil
				})
			}
			return nil
		}}, seen
}

func TestR14_EphemeralWindowRidesInMemory(t *testing.T) {
	t.Parallel()
	p, seen := newEphWindow(t, false)
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
	evs := appendT(t, mem, ev("tick"))
	pushT(t, eng, evs, 1, 4)
	eq(t, "seen", seen.get(), []string{"tick@1", "chunk@2", "chunk@3", "tick@4"})
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[nState]{Offset: 4, State: nState{4}})
}

func TestR15_FreshEngineSkipsDeadEphemerals(t *testing.T) {
	t.Parallel()
	p, _ := newEphWindow(t, false)
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

func TestR16_RepairAfterAFailedPushKeepsTheEphemeral(t *testing.T) {
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

func TestR17_StarPlusNamedEphemeral(t *testing.T) {
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
	// One call keeps the offsets deterministic (upstream appends them without settling between).
	appendT(t, mem, eph("chunk"), eph("noise"), ev("tock")) // @3, @4, @5
	settle(t, mem)
	if len(deltasFor(mem, "r17")) < 1 {
		t.Error("no delta")
	}
	eq(t, "seen", seen.get(), []string{"tick@1", "chunk@3", "tock@5"})
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))).State, nState{3})
}

func TestR18_ReReduceSkipsAFailingOldEventOnce(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p1, _ := newVersioned(t, "1")
	v1 := newEngine[nState](t, p1, mem, cps)
	appendT(t, mem, ev("e"), ev("e"), ev("e"))
	ctx := ctxFor(t)
	mustDo(t, v1.CatchUpFromLog(ctx))
	p2, _ := newVersioned(t, "2", 2)
	sites := &siteLog{}
	v2 := newEngine[nState](t, p2, mem, cps, func(c *foldstream.EngineConfig) { c.Reporter = sites })
	eq(t, "v2", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)).State, nState{2})
	eq(t, "reported", sites.get(), []string{foldstream.SiteReduce})
	p3, _ := newVersioned(t, "2", 2)
	sites3 := &siteLog{}
	v3 := newEngine[nState](t, p3, mem, cps, func(c *foldstream.EngineConfig) { c.Reporter = sites3 })
	eq(t, "v3", must[foldstream.Snapshot[nState]](t)(v3.Snapshot(ctx)), foldstream.Snapshot[nState]{Offset: 3, State: nState{2}})
	eq(t, "v3 replayed nothing", sites3.get(), []string(nil))
}
