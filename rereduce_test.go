// The version bump's reduce-only re-reduce (docs/engine.md#re-reduce).
package foldstream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// Acceptance case P-53 (docs/engine.md#acceptance-cases).
func TestCoercionSurvivesReReduce(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	ctx := ctxFor(t)
	v1 := newEngine[sumState](t, newAdder(t, "1", nil), mem, cps)
	appendT(t, mem, foldstream.EventInput{Type: "demo/add", Payload: json.RawMessage(`{"n":"2"}`)},
		foldstream.EventInput{Type: "demo/add", Payload: json.RawMessage(`{"n":3}`)})
	mustDo(t, v1.CatchUpFromLog(ctx))
	eq(t, "v1", must[foldstream.Snapshot[sumState]](t)(v1.Snapshot(ctx)).State, sumState{Sum: 5})
	v2 := newEngine[sumState](t, newAdder(t, "2", nil), mem, cps)
	eq(t, "v2", must[foldstream.Snapshot[sumState]](t)(v2.Snapshot(ctx)).State, sumState{Sum: 5})
	cp, _ := cps.Get("adder")
	eq(t, "v2 checkpoint version", cp.ReducerVersion, "2")
}

// Acceptance case P-28 (docs/engine.md#acceptance-cases).
func TestVersionBumpReReducesWithoutEffects(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mk := func(version string, effects *rec[int64]) *fn[nState] {
		return &fn[nState]{Base: foldstream.NewBase(nContract(t, "reduce", version, tickType)), reduce: incN,
			process: func(a *foldstream.ProcessEventArgs[nState]) error {
				if a.Event != nil {
					effects.add(a.Event.Offset)
				}
				return nil
			}}
	}
	effects := &rec[int64]{}
	ctx := ctxFor(t)
	v1 := newEngine[nState](t, mk("1.0.0", effects), mem, cps)
	appendT(t, mem, ev(tickType), ev(tickType))
	mustDo(t, v1.CatchUpFromLog(ctx))
	eq(t, "v1 effects", len(effects.get()), 2)
	v2 := newEngine[nState](t, mk("2.0.0", effects), mem, cps)
	eq(t, "v2 state", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)).State, nState{2})
	eq(t, "effects", len(effects.get()), 2)
}

// Acceptance case P-43 (docs/engine.md#acceptance-cases).
func TestStaleRowWithoutStateAtCursorZero(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mustDo(t, cps.WriteCheckpoint(context.Background(), "count", foldstream.Checkpoint{ReducerVersion: "1.0.0"}, false))
	p, _ := newCount(t, "2.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	eq(t, "snapshot", must[foldstream.Snapshot[ticksState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[ticksState]{Offset: 0, State: ticksState{0}})
}

// Acceptance case P-44 (docs/engine.md#acceptance-cases).
func TestWaitAfterVersionBumpHasNoEffects(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, _ := newCount(t, "1.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	unreg := mem.Register(eng)
	for range 3 {
		appendT(t, mem, ev("tick"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	unreg()
	p2, effects2 := newCount(t, "2.0.0")
	eng2 := newEngine[ticksState](t, p2, mem, cps)
	mustDo(t, eng2.WaitUntilProcessed(ctxFor(t), 3, 2*time.Second))
	eq(t, "effects", effects2.get(), []int64(nil))
}

// A version bump may change the state's shape: a stale row whose state no longer decodes must not
// make construction fail; the re-reduce replaces it.
func TestVersionBumpWithANewStateShape(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mustDo(t, cps.WriteCheckpoint(ctxFor(t), "shape", foldstream.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 1,
		State: json.RawMessage(`{"n":"not a number any more"}`)}, true))
	appendT(t, mem, ev("tick"))
	sites := &siteLog{}
	eng := newEngine[nState](t, &fn[nState]{Base: foldstream.NewBase(nContract(t, "shape", "2", "tick")), reduce: incN}, mem, cps,
		func(c *foldstream.EngineConfig) { c.Reporter = sites })
	// The re-reduce publishes the new live state as an ephemeral delta, which takes offset 2 of the
	// memory stream, whose read proof covers ephemerals (docs/engine.md, "MemoryStream"): the first
	// snapshot sees offset 1 or, if its catch-up ran after the delta's append, 2. Once the delta
	// has settled, a snapshot's catch-up always covers it.
	first := must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t)))
	if first.State != (nState{1}) || (first.Offset != 1 && first.Offset != 2) {
		t.Fatalf("snapshot: got %+v, want state {1} at offset 1 (or 2, past the live-state delta)", first)
	}
	drain(t, eng)
	settle(t, mem)
	eq(t, "snapshot after the delta settled", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[nState]{Offset: 2, State: nState{1}})
	eq(t, "reported", sites.get()[0], foldstream.SiteCheckpoint)
	// The same version with an undecodable state is corruption: construction fails.
	_, err := foldstream.NewEngine[nState](&fn[nState]{Base: foldstream.NewBase(nContract(t, "shape", "1", "tick"))},
		foldstream.EngineConfig{Stream: mem, Checkpoints: func() foldstream.CheckpointStorage {
			c := testsupport.MemoryCheckpoints()
			mustDo(t, c.WriteCheckpoint(ctxFor(t), "shape", foldstream.Checkpoint{ReducerVersion: "1", State: json.RawMessage(`{"n":"x"}`)}, true))
			return c
		}()})
	if err == nil {
		t.Error("an undecodable current-version state was accepted")
	}
}

// Acceptance case R-11 (docs/engine.md#acceptance-cases).
func TestReReduceStopsAtTheOldCursor(t *testing.T) {
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

// Acceptance case R-12 (docs/engine.md#acceptance-cases).
func TestWaitRunsTheReReduce(t *testing.T) {
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

// Acceptance case R-18 (docs/engine.md#acceptance-cases).
func TestReReduceSkipsAFailingOldEventOnce(t *testing.T) {
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

// docs/engine.md#loading-the-checkpoint: after a version bump the live state is seeded with the
// *old* version's projection, and the re-reduce itself publishes (the healing delta) — even when
// no range follows.
func TestReReducePublishesOneHealingDelta(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	v1 := newEngine[tally2State](t, newTally2(t, "1", 1), mem, cps)
	appendT(t, mem, ev("tick"), ev("tick"))
	mustDo(t, v1.CatchUpFromLog(ctxFor(t)))
	drain(t, v1)
	// v2 reads a log that ends exactly at the old cursor, so no range follows the re-reduce: only
	// the re-reduce's own publish can heal the live state.
	log := mem.Events()
	st := &stubStream{read: func(after int64, _ int) (foldstream.ReadPage, error) {
		var evs []foldstream.Event
		for _, e := range log {
			if e.Offset > after {
				evs = append(evs, e)
			}
		}
		return foldstream.ReadPage{Events: evs, ScannedThroughOffset: max(after, 2), AtHead: true}, nil
	}}
	v2 := newEngine[tally2State](t, newTally2(t, "2", 10), st, cps)
	jsonEq(t, "seed", foldstream.JSON(v2.LiveState().Get()), `{"count":2}`)
	mustDo(t, v2.CatchUpFromLog(ctxFor(t)))
	drain(t, v2)
	var ds []foldtype.LiveStateDelta
	for _, in := range st.appends {
		var d foldtype.LiveStateDelta
		mustDo(t, json.Unmarshal(in.Payload, &d))
		ds = append(ds, d)
	}
	if len(ds) != 1 {
		t.Fatalf("healing deltas: %d, want 1", len(ds))
	}
	eq(t, "patch", string(foldstream.JSON(ds[0].Patch)), `[{"op":"replace","path":"/count","value":20}]`)
	eq(t, "snapshot", must[foldstream.Snapshot[tally2State]](t)(v2.Snapshot(ctxFor(t))),
		foldstream.Snapshot[tally2State]{Offset: 2, State: tally2State{Count: 20, Secret: "hidden"}})
}
