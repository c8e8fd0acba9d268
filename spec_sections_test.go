package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// Spec §11.3 / §18.1: the ceiling counts the characters of the state's JSON text as upstream's
// JSON.stringify writes it (UTF-16 code units). encoding/json's default HTML escaping writes "<" as
// the six characters \u003c, which JSON.stringify never does; a state of 500 000 "<" is ~500 000
// characters upstream and must not be refused (nor latched) as a 3-million-character state.
func TestS11_3_CeilingCountsJSONTextLikeUpstream(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[bigState]](t)(foldstream.DefineContract(foldstream.ContractConfig[bigState]{Slug: "markup", Version: "1"}))
	p := &fn[bigState]{Base: foldstream.NewBase(c), project: projectNull[bigState],
		reduce: func(a foldstream.ReduceArgs[bigState]) (bigState, bool, error) {
			return bigState{S: strings.Repeat("<", 500000)}, true, nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[bigState](t, p, mem, cps)
	appendT(t, mem, ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "writes", cps.Writes(), 1)
	cp, ok := cps.Get("markup")
	if !ok {
		t.Fatal("no row")
	}
	if n := foldstream.UTF16Len(string(cp.State)); n != 500000+len(`{"s":""}`) {
		t.Errorf("stored state is %d chars, want the JSON.stringify length %d", n, 500000+len(`{"s":""}`))
	}
}

// Spec §12.1 step 4: the patch ceiling counts the patch's JSON text like JSON.stringify. A patch
// carrying 300 000 "<" is ~300 000 characters, far under 1048576: it must travel, not be nulled.
func TestS12_1_PatchCeilingCountsJSONTextLikeUpstream(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, _ := newLive(sink, map[string]string{"s": ""})
	l.Set(map[string]string{"s": strings.Repeat("<", 300000)})
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 || fs[0].Patch == nil {
		t.Fatalf("got %d frames (patch nil=%v); want one frame with a patch", len(fs), len(fs) == 1 && fs[0].Patch == nil)
	}
}

// Spec §6 step 2: only an absent payload is validated as {}; a present falsy non-object payload
// (0, false, "") is validated as itself and so fails an object schema. The absent payload's
// normalized form is {} (it is what reduce and processEvent see).
func TestS6_AbsentPayloadIsEmptyObjectFalsyPayloadsFail(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[nState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nState]{
		Slug: "loose", Version: "1",
		Events: []foldstream.EventDefinition{foldstream.DefineEventSchema("demo/any", "", json.RawMessage(`{"type":"object"}`))}}))
	for _, raw := range []string{`0`, `false`, `""`} {
		if _, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: json.RawMessage(raw)}); err == nil {
			t.Errorf("payload %s accepted", raw)
		}
	}
	for _, raw := range []json.RawMessage{nil, json.RawMessage(`null`)} {
		norm, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: raw})
		if err != nil {
			t.Fatalf("absent payload %q refused: %v", raw, err)
		}
		jsonEq(t, "normalized absent payload", norm.Payload, `{}`)
	}
}

// Spec §8.3 step 2: on timeout the waiter is removed from the list (no leak); the same holds for a
// caller whose context ends, and for the prompt failure with the catch-up's error (step 3).
func TestS8_3_TimedOutWaiterIsRemoved(t *testing.T) {
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

// Spec §10.3 step 4: revive awaits the claim chain before returning, so the host derives its next
// alarm from the claim that actually landed. With a claim that takes 50 ms to land, the doubled
// claim must already be recorded when Revive returns.
func TestS10_3_ReviveAwaitsItsClaim(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 })
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 })
	mem.SetClaimFunc(func(context.Context, time.Time) error { time.Sleep(50 * time.Millisecond); return nil })
	mustDo(t, eng.Revive(ctxFor(t)))
	eq(t, "claims when Revive returned", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second)})
	close(a.end(1))
	drain(t, eng)
}

// Spec §5.4: no push is ever discarded. A push whose caller gave up (its context ended) while the
// push was still queued behind another unit must still run once its turn comes: its ephemerals
// ride exactly this push, and nothing would deliver them again.
func TestS5_4_QueuedPushRunsAfterItsCallerGaveUp(t *testing.T) {
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
	waitUntil(t, "the push is queued", func() bool { return eng.Pending() == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller: got %v, want context.Canceled", err)
	}
	close(release)
	mustDo(t, <-catchUp)
	drain(t, eng)
	eq(t, "state", must[foldstream.Snapshot[seenState]](t)(eng.Snapshot(bg)).State.Seen, []string{"chunk@1"})
}

// Spec §10.1: when the last attempt settles, revivesWhileBusy is reset, so the next busy revive
// claims 40 s again (not 160 s, continuing the old doubling).
func TestS10_1_RevivesWhileBusyResetsWhenIdle(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 && len(mem.Claims()) == 1 })
	mustDo(t, eng.Revive(ctx))
	mustDo(t, eng.Revive(ctx))
	close(a.end(1))
	drain(t, eng)
	second := appendT(t, mem, ev("e"))[0].Offset
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 && len(mem.Claims()) == 5 })
	mustDo(t, eng.Revive(ctx))
	eq(t, "claims", mem.Claims(), []time.Time{
		testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second), testsupport.T.Add(80 * time.Second), {},
		testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second)})
	close(a.end(second))
	drain(t, eng)
}

// Spec §5.6 step 4: an ephemeral-only range writes nothing, yet the in-memory cursor still moves to
// range.through (so a waiter on the ephemeral's offset resolves from the push).
func TestS5_6_EphemeralOnlyRangeMovesTheInMemoryCursor(t *testing.T) {
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

// Spec §5.4 step 2b: gap repair reduces and commits with atHead false — repair never delivers
// caughtUp; only the pushed batch itself (at head) does.
func TestS5_4_GapRepairNeverDeliversCaughtUp(t *testing.T) {
	t.Parallel()
	p, deliveries := newRecorder(t, "repair", "tick")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	evs := appendT(t, mem, ev("tick"), ev("tick"), ev("tick"))
	pushT(t, eng, evs[2:], 2, 3)
	eq(t, "deliveries", deliveries.get(), []string{"{1 false}", "{2 false}", "{3 true}"})
}

// Spec §7 step 1: the emits check runs for every event before anything is appended, so one
// undeclared event anywhere in the call refuses the whole call (here the second of two).
func TestS7_OneUndeclaredEmitRefusesTheWholeCall(t *testing.T) {
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

type tally2State struct {
	Count  int    `json:"count"`
	Secret string `json:"secret"`
}

func tally2Contract(t *testing.T, version string) *foldstream.Contract[tally2State] {
	return must[*foldstream.Contract[tally2State]](t)(foldstream.DefineContract(foldstream.ContractConfig[tally2State]{
		Slug: "tally", Version: version, Consumes: []string{"tick"},
		Initial: func() (tally2State, error) { return tally2State{Secret: "hidden"}, nil }}))
}

func newTally2(t *testing.T, version string, step int) *fn[tally2State] {
	return &fn[tally2State]{Base: foldstream.NewBase(tally2Contract(t, version)),
		reduce: func(a foldstream.ReduceArgs[tally2State]) (tally2State, bool, error) {
			s := a.State
			s.Count += step
			return s, true, nil
		},
		project: func(s tally2State) (any, error) { return map[string]int{"count": s.Count}, nil }}
}

// Spec §5.2 step 2 / §11.2: a row whose state column is NULL reads back as initialState() — the
// contract's initial state, not Go's zero value.
func TestS11_2_NullStateReadsAsTheInitialState(t *testing.T) {
	t.Parallel()
	cps := testsupport.MemoryCheckpoints()
	mustDo(t, cps.WriteCheckpoint(context.Background(), "tally", foldstream.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 4}, false))
	eng := newEngine[tally2State](t, newTally2(t, "1", 1), &stubStream{}, cps)
	eq(t, "snapshot", must[foldstream.Snapshot[tally2State]](t)(eng.Snapshot(ctxFor(t))),
		foldstream.Snapshot[tally2State]{Offset: 4, State: tally2State{Secret: "hidden"}})
}

// Spec §5.2 step 4 and §9: after a version bump the live state is seeded with the *old* version's
// projection, and the re-reduce itself publishes (the healing delta) — even when no range follows.
func TestS9_ReReduceSeedsFromTheStaleStateAndPublishesTheHealingDelta(t *testing.T) {
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
	var ds []foldstream.LiveStateDelta
	for _, in := range st.appends {
		var d foldstream.LiveStateDelta
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

// Spec §10.3 step 2: revive's eventless pass is followed by publishLiveState(), so a runtime field
// the at-head pass changed reaches the live state.
func TestS10_3_ReviveEventlessPassPublishes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	wakes := 0
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "waker", "1", "tick")), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				mu.Lock()
				wakes++
				mu.Unlock()
			}
			return nil
		},
		project: func(nState) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			return map[string]int{"wakes": wakes}, nil
		}}
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	mustDo(t, eng.Revive(ctxFor(t)))
	jsonEq(t, "live state", foldstream.JSON(eng.LiveState().Get()), `{"wakes":1}`)
}

// Spec §15 / §13.4: only durable events are registered by idempotency key in the memory stream; an
// ephemeral with a key neither dedupes nor conflicts.
func TestS15_MemoryStreamRegistersOnlyDurablesByKey(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	e1 := appendT(t, mem, foldstream.EventInput{Type: "x", Ephemeral: true, IdempotencyKey: "k", Payload: json.RawMessage(`{"a":1}`)})
	e2 := appendT(t, mem, foldstream.EventInput{Type: "x", IdempotencyKey: "k", Payload: json.RawMessage(`{"a":2}`)})
	e3 := appendT(t, mem, foldstream.EventInput{Type: "x", IdempotencyKey: "k", Payload: json.RawMessage(`{"a":2}`)})
	e4 := appendT(t, mem, foldstream.EventInput{Type: "x", Ephemeral: true, IdempotencyKey: "k", Payload: json.RawMessage(`{"a":3}`)})
	eq(t, "offsets", []int64{e1[0].Offset, e2[0].Offset, e3[0].Offset, e4[0].Offset}, []int64{1, 2, 2, 3})
}

type explosiveState struct{}

func (explosiveState) MarshalJSON() ([]byte, error) { panic("state marshal exploded") }

// A panicking hook never escapes into the caller's goroutine: SnapshotJSON of a state whose
// MarshalJSON panics fails with an error instead of crashing the host.
func TestSnapshotJSONContainsAPanickingMarshal(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[explosiveState]](t)(foldstream.DefineContract(foldstream.ContractConfig[explosiveState]{
		Slug: "explosive", Version: "1", Consumes: []string{"tick"}}))
	p := &fn[explosiveState]{Base: foldstream.NewBase(c), project: projectNull[explosiveState]}
	eng := newEngine[explosiveState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	if _, _, err := eng.SnapshotJSON(ctxFor(t)); err == nil {
		t.Fatal("SnapshotJSON succeeded")
	}
}

// Spec §5.4 step 2b, stop condition: against a real stream the read proof never passes the durable
// mark, so when the offsets below range.after were ephemerals the repair finds the log ran out
// (scannedThroughOffset <= cursor) and stops — it must not spin — and the push then commits.
func TestS5_4_GapRepairStopsWhenTheLogRunsOutBelowAfter(t *testing.T) {
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
