package foldstream_test

// Cases the spec implies but does not list.

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// §5.6 step 2: if the last consumable event of an at-head range is skipped as malformed, caughtUp
// counts as not delivered, so the eventless pass runs.
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

// §5.2: construction never fails because of a failing projection; it is reported and the seed is
// absent.
func TestFailingProjectionNeverFailsConstruction(t *testing.T) {
	t.Parallel()
	sites := &siteLog{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "broken", "1", "tick")), reduce: incN,
		project: func(nState) (any, error) { panic("projection exploded") }}
	eng, err := foldstream.NewEngine[nState](p, foldstream.EngineConfig{Stream: testsupport.NewMemoryStream(), Checkpoints: testsupport.MemoryCheckpoints(), Reporter: sites})
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	eq(t, "reported", sites.get(), []string{foldstream.SiteLiveState})
	eng.PublishLiveState() // reported again, never panics
	eq(t, "reported", len(sites.get()), 2)
}

// §5.2 step 4 + §9: after a version bump the live state is seeded with the old version's
// projection, so the publish after the re-reduce emits exactly one healing delta.
func TestVersionBumpEmitsOneHealingDelta(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mk := func(version string, step int) *fn[nState] {
		return &fn[nState]{Base: foldstream.NewBase(nContract(t, "heal", version, "tick")),
			reduce: func(a foldstream.ReduceArgs[nState]) (nState, bool, error) {
				return nState{a.State.N + step}, true, nil
			}}
	}
	v1 := newEngine[nState](t, mk("1", 1), mem, cps)
	appendT(t, mem, ev("tick"), ev("tick"))
	mustDo(t, v1.CatchUpFromLog(ctxFor(t)))
	drain(t, v1)
	before := len(deltasFor(mem, "heal"))
	v2 := newEngine[nState](t, mk("2", 10), mem, cps)
	s := must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctxFor(t)))
	eq(t, "state", s.State, nState{20})
	drain(t, v2)
	ds := deltasFor(mem, "heal")[before:]
	if len(ds) != 1 {
		t.Fatalf("healing deltas: got %d, want 1", len(ds))
	}
	eq(t, "patch", string(foldstream.JSON(ds[0].Patch)), `[{"op":"replace","path":"/n","value":20}]`)
}

// §5.3: a failed unit does not wedge the chain; the caller of the failed unit still sees it.
// §5.7: a failure raised directly by ProcessEvent (error or panic) fails the batch.
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

// §7: in the eventless pass the stamped provenance omits whileProcessing; an append whose failure
// nobody awaits does not fail the batch.
func TestEventlessEmitProvenance(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "pinger", Version: "3", Consumes: []string{"go"}, Emits: []string{"pinged"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			_, err := a.Append(a.Context(), foldstream.EventInput{Type: "pinged", Source: &foldstream.Source{Grant: "forged"}, IdempotencyKey: "p"})
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
	eq(t, "source", *got[0].Source, foldstream.Source{Processor: &foldstream.ProcessorSource{Slug: "pinger", Version: "3"}})
	if slices.ContainsFunc(mem.Events(), func(e foldstream.Event) bool { return e.Type == "undeclared" }) {
		t.Error("an undeclared type was appended")
	}
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
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[nState]{Offset: 1, State: nState{1}})
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
