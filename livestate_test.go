package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/testsupport"
)

// Acceptance case P-32 (docs/engine.md#acceptance-cases).
func TestOneDeltaPerChange(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds := mem.EventsOfType(foldtype.LiveStateChangedType)
	if len(ds) != 1 {
		t.Fatalf("deltas: got %d, want 1", len(ds))
	}
	if !ds[0].Ephemeral {
		t.Error("delta is not ephemeral")
	}
	var p map[string]any
	_ = json.Unmarshal(ds[0].Payload, &p)
	jsonEq(t, "key+patch", foldstream.JSON(map[string]any{"key": p["key"], "patch": p["patch"]}),
		`{"key":"tally","patch":[{"op":"replace","path":"/count","value":1}]}`)
}

// Acceptance case P-33 (docs/engine.md#acceptance-cases).
func TestEachDeltaChainsFromThePreviousOne(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	for _, typ := range []string{"tick", "other", "tick"} {
		appendT(t, mem, ev(typ))
		settle(t, mem)
	}
	ds := deltas(mem)
	if len(ds) != 2 {
		t.Fatalf("deltas: got %d, want 2", len(ds))
	}
	eq(t, "chain", ds[1].From, ds[0].To)
}

// Acceptance case P-34 (docs/engine.md#acceptance-cases).
func TestLiveSnapshotIsTheProjection(t *testing.T) {
	t.Parallel()
	mem, eng := setupTally(t)
	appendT(t, mem, ev("other"))
	settle(t, mem)
	seed := must[foldtype.LiveSnapshot[json.RawMessage]](t)(eng.LiveSnapshot(ctxFor(t)))
	eq(t, "seed state", string(seed.State), `{"count":0}`)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds := deltas(mem)
	if len(ds) == 0 {
		t.Fatal("no delta")
	}
	eq(t, "from", ds[0].From, seed.Rev)
}

// Acceptance case P-35 (docs/engine.md#acceptance-cases).
func TestEqualFreshProjectionEmitsNothing(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "flat", "1", "tick")), reduce: incN,
		project: func(nState) (any, error) { return map[string]bool{"steady": true}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "deltas", len(deltas(mem)), 0)
}

// Acceptance case P-36 (docs/engine.md#acceptance-cases).
func TestNoProcessorReducesADelta(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	sneaky := &fn[nState]{Base: foldstream.NewBase(nContract(t, "sneaky", "1", "*", foldtype.LiveStateChangedType)), reduce: incN, project: projectNull[nState]}
	s := newEngine[nState](t, sneaky, mem, testsupport.MemoryCheckpoints())
	mem.Register(s)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "deltas", len(deltas(mem)), 1)
	eq(t, "sneaky", must[foldstream.Snapshot[nState]](t)(s.Snapshot(ctxFor(t))).State, nState{1})
}

// Acceptance case P-38 (docs/engine.md#acceptance-cases).
func TestRuntimeFieldInTheProjection(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "runtime", Version: "1", Consumes: []string{"tick"}}))
	var last int64 // written and read on the engine's chain only
	p := &fn[emptyState]{Base: foldstream.NewBase(c),
		process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
			if a.Event != nil {
				last = a.Event.Offset
			}
			return nil
		},
		project: func(emptyState) (any, error) { return map[string]any{"lastSeenOffset": last}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"), ev("tick"))
	settle(t, mem)
	ds := deltas(mem)
	if len(ds) != 1 {
		t.Fatalf("deltas: got %d, want 1", len(ds))
	}
	eq(t, "key", ds[0].Key, "runtime")
	jsonEq(t, "patch", foldstream.JSON(ds[0].Patch), `[{"op":"replace","path":"/lastSeenOffset","value":2}]`)
}

// Acceptance case P-39 (docs/engine.md#acceptance-cases).
func TestKeptStateEmitsNothing(t *testing.T) {
	t.Parallel()
	fired := &rec[int64]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "still", "1", "tick")),
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				fired.add(a.Event.Offset)
			}
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	appendT(t, mem, ev("tick"), ev("tick"))
	settle(t, mem)
	eq(t, "fired", len(fired.get()), 3)
	eq(t, "deltas", len(deltas(mem)), 0)
}

// Acceptance case P-40 (docs/engine.md#acceptance-cases).
func TestUnserializableProjectionEmitsNoDeltaAndKeepsTheState(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "biggie", "1", "tick")), reduce: incN,
		project: func(s nState) (any, error) { return map[string]any{"n": s.N, "f": func() {}}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))).State, nState{1})
	eq(t, "deltas", len(deltas(mem)), 0)
}

// docs/engine.md#loading-the-checkpoint: construction never fails because of a failing projection;
// it is reported and the seed is absent.
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

// Acceptance case P-54 (docs/engine.md#acceptance-cases).
func TestDeltasChainAndApply(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, epoch := newLive(sink, map[string]int{"n": 0})
	base := testsupport.T.UnixMilli() * 4096
	if epoch < base || epoch > base+4095 {
		t.Errorf("epoch %d outside [%d, %d]", epoch, base, base+4095)
	}
	l.Set(map[string]int{"n": 1})
	l.Set(map[string]int{"n": 2})
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 2 {
		t.Fatalf("frames: got %d, want 2", len(fs))
	}
	eq(t, "frame 1", [2]int64{fs[0].From, fs[0].To}, [2]int64{epoch, epoch + 1})
	eq(t, "frame 2", [2]int64{fs[1].From, fs[1].To}, [2]int64{epoch + 1, epoch + 2})
	doc := json.RawMessage(`{"n":0}`)
	for _, f := range fs {
		doc = must[json.RawMessage](t)(foldstream.ApplyPatch(doc, foldstream.JSON(f.Patch)))
	}
	jsonEq(t, "applied", doc, `{"n":2}`)
	s := l.Snapshot()
	eq(t, "snapshot", s.Rev, epoch+2)
	eq(t, "snapshot state", s.State, any(map[string]int{"n": 2}))
}

// Acceptance case P-55 (docs/engine.md#acceptance-cases).
func TestOneDeltaAppendInFlightAndLaterOnesQueue(t *testing.T) {
	t.Parallel()
	sink := &recSink{hold: true, release: make(chan struct{}), notify: make(chan struct{}, 3)}
	l, base := newLive(sink, map[string]int{"n": 0})
	for n := 1; n <= 3; n++ {
		l.Set(map[string]int{"n": n})
	}
	// Each delta is issued only after the previous append returned: the sink holds every append
	// until released, and records an overlap if a second one arrives meanwhile.
	for n := 1; n <= 3; n++ {
		<-sink.notify
		eq(t, fmt.Sprintf("frames after issue %d", n), len(sink.frames()), n)
		eq(t, fmt.Sprintf("delta %d to", n), sink.frames()[n-1].To, base+int64(n))
		sink.release <- struct{}{}
	}
	waitLive(t, l)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.overlap {
		t.Fatal("a delta was issued while the previous append was still pending")
	}
}

// Acceptance case P-56 (docs/engine.md#acceptance-cases).
func TestSettingTheHeldValueAgainEmitsNothing(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	big := make([]int, 1000)
	v := map[string]any{"items": big}
	l, epoch := newLive(sink, v)
	l.Set(v)
	waitLive(t, l)
	eq(t, "frames", len(sink.frames()), 0)
	eq(t, "rev", l.Snapshot().Rev, epoch)
}

// Acceptance case P-57 (docs/engine.md#acceptance-cases).
func TestSettingAnEqualFreshValueEmitsNothing(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, epoch := newLive(sink, map[string]int{"n": 1})
	l.Set(map[string]float64{"n": 1})
	l.Set(struct {
		N int `json:"n"`
	}{1})
	waitLive(t, l)
	eq(t, "frames", len(sink.frames()), 0)
	eq(t, "rev", l.Snapshot().Rev, epoch)
}

// Acceptance case P-58 (docs/engine.md#acceptance-cases).
func TestUnserializableValueIsHeldAndTheNextFrameDiffsFromIt(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, epoch := newLive(sink, map[string]any{"n": 0})
	l.Set(map[string]any{"n": 1})
	waitLive(t, l)
	eq(t, "frames after n=1", len(sink.frames()), 1)
	bad := map[string]any{"n": 1, "big": math.Inf(1)}
	l.Set(bad)
	waitLive(t, l)
	eq(t, "frames after unserializable", len(sink.frames()), 1)
	s := l.Snapshot()
	eq(t, "rev", s.Rev, epoch+2)
	if m, ok := s.State.(map[string]any); !ok || !math.IsInf(m["big"].(float64), 1) {
		t.Errorf("held value: got %#v", s.State)
	}
	l.Set(map[string]any{"n": 2})
	l.Set(map[string]any{"n": 3})
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 3 {
		t.Fatalf("frames: %d", len(fs))
	}
	eq(t, "frame n=2", []any{fs[1].Key, fs[1].From, fs[1].To, string(foldstream.JSON(fs[1].Patch))},
		[]any{"k", epoch + 2, epoch + 3, `[{"op":"replace","path":"/n","value":2}]`})
	eq(t, "frame n=3", []any{fs[2].From, string(foldstream.JSON(fs[2].Patch))},
		[]any{epoch + 3, `[{"op":"replace","path":"/n","value":3}]`})
}

// Acceptance case P-59 (docs/engine.md#acceptance-cases).
func TestFailingSinkNeverFailsSet(t *testing.T) {
	t.Parallel()
	for _, sink := range []*recSink{{fail: errors.New("sink down")}, {panics: true}} {
		l, epoch := newLive(sink, map[string]int{"n": 0})
		l.Set(map[string]int{"n": 1})
		waitLive(t, l)
		s := l.Snapshot()
		eq(t, "rev", s.Rev, epoch+1)
		eq(t, "state", s.State, any(map[string]int{"n": 1}))
		l.Set(map[string]int{"n": 2}) // the chain is not wedged
		waitLive(t, l)
		eq(t, "frames", len(sink.frames()), 2)
	}
}

func TestLiveState_OversizePatchIsNull(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, _ := newLive(sink, map[string]string{"s": ""})
	l.Set(map[string]string{"s": strings.Repeat("x", foldstream.MaxPatchChars)})
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 || fs[0].Patch != nil {
		t.Fatalf("got %d frames, patch nil=%v; want one null patch", len(fs), len(fs) == 1 && fs[0].Patch == nil)
	}
	_, err := foldstream.ApplyPatch(json.RawMessage(`{}`), json.RawMessage(`null`))
	if !errors.Is(err, foldstream.ErrPatchNull) {
		t.Errorf("ApplyPatch(null): %v", err)
	}
}

// FuzzLiveStateChain sets three values in a row and checks that applying the emitted deltas to the
// seed reproduces the last value (exercising the holder's incremental member index).
func FuzzLiveStateChain(f *testing.F) {
	f.Add(`{"a":1,"b":[1]}`, `{"a":2,"b":[1,2]}`, `{"b":[1,2],"c":{"d":"e"}}`)
	f.Add(`{"x":"a","k":1}`, `{"x":"a\",\"k\":1","k":1}`, `{"k":2}`)
	f.Add(`{}`, `[]`, `{"a":{}}`)
	f.Fuzz(func(t *testing.T, s0, s1, s2 string) {
		var vals [3]any
		for i, s := range []string{s0, s1, s2} {
			if json.Unmarshal([]byte(s), &vals[i]) != nil {
				return
			}
		}
		sink := &recSink{}
		l, _ := newLive(sink, vals[0])
		l.Set(vals[1])
		l.Set(vals[2])
		if err := l.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		doc := foldstream.JSON(vals[0])
		for _, fr := range sink.frames() {
			out, err := foldstream.ApplyPatch(doc, foldstream.JSON(fr.Patch))
			if err != nil {
				t.Fatalf("apply %s to %s: %v", foldstream.JSON(fr.Patch), doc, err)
			}
			doc = out
		}
		if !rawjson.Equal(doc, foldstream.JSON(vals[2])) {
			t.Fatalf("chain from %s ends at %s, want %s", s0, doc, foldstream.JSON(vals[2]))
		}
	})
}

// Integers beyond 2^53 (snowflake ids, nanosecond timestamps) are distinct JSON values even where
// float64 cannot tell them apart: a change is a delta and a new revision.
func TestLiveStateChangeOfALargeIntegerIsADelta(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	for _, initial := range []any{
		map[string]int64{"id": 9007199254740992},     // the indexed (object) diff
		[]map[string]int64{{"id": 9007199254740992}}, // the plain diff
	} {
		sink.mu.Lock()
		sink.issued = nil
		sink.mu.Unlock()
		l, base := newLive(sink, initial)
		switch initial.(type) {
		case map[string]int64:
			l.Set(map[string]int64{"id": 9007199254740993})
		default:
			l.Set([]map[string]int64{{"id": 9007199254740993}})
		}
		waitLive(t, l)
		fs := sink.frames()
		if len(fs) != 1 || fs[0].From != base || fs[0].To != base+1 {
			t.Fatalf("%T: got frames %+v, want one from %d to %d", initial, fs, base, base+1)
		}
		eq(t, "rev", l.Snapshot().Rev, base+1)
		applied := must[json.RawMessage](t)(foldstream.ApplyPatch(foldstream.JSON(initial), foldstream.JSON(fs[0].Patch)))
		if !strings.Contains(string(applied), "9007199254740993") {
			t.Errorf("%T: applied delta gives %s", initial, applied)
		}
	}
}

// A caller who sees offset n — ReducedThroughOffset, a released WaitUntilProcessed, a Snapshot —
// finds the live state of n already published: the engine publishes, then shows the new cursor.
// The projection runs while the new live state is being published, so it checks what a caller
// sees at that moment.
func TestCallersSeeAnOffsetOnlyAfterItsLiveStateIsPublished(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	var eng *foldstream.Engine[nState]
	early, checked := &rec[string]{}, false
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "published", "1", tickType)), reduce: incN,
		project: func(s nState) (any, error) {
			if s.N != 1 || checked { // later units may project n=1 again, after it was published
				return s, nil
			}
			checked = true
			if off := eng.ReducedThroughOffset(); off >= 1 {
				early.add("ReducedThroughOffset")
			}
			if eng.WaitUntilProcessed(gone, 1, time.Hour) == nil {
				early.add("WaitUntilProcessed")
			}
			if snap, err := eng.Snapshot(gone); err == nil && snap.Offset >= 1 {
				early.add("Snapshot")
			}
			return s, nil
		}}
	eng = newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.WaitUntilProcessed(ctx, 1, 0))
	live := must[foldtype.LiveSnapshot[json.RawMessage]](t)(eng.LiveSnapshot(ctx))
	jsonEq(t, "live state at 1", live.State, `{"n":1}`)
	eq(t, "seen before the live state was published", early.get(), []string(nil))
}

// Acceptance case R-13 (docs/engine.md#acceptance-cases).
func TestFailingProjectionLosesOnlyThatNotification(t *testing.T) {
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

// docs/engine.md#live-state: the patch ceiling counts the patch's JSON text written without HTML
// escapes. A patch carrying 300 000 "<" is ~300 000 characters, far under 1048576: it must travel,
// not be nulled.
func TestPatchCeilingCountsJSONTextWithoutHTMLEscapes(t *testing.T) {
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

// A panicking hook never escapes into the caller's goroutine: SnapshotJSON of a state whose
// MarshalJSON panics fails with an error instead of crashing the host.
func TestSnapshotJSONContainsAPanickingMarshal(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[explosiveState]](t)(foldstream.DefineContract(foldstream.ContractConfig[explosiveState]{
		Slug: "explosive", Version: "1", Consumes: []string{"tick"}}))
	p := &fn[explosiveState]{Base: foldstream.NewBase(c), project: projectNull[explosiveState]}
	eng := newEngine[explosiveState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	if _, err := eng.SnapshotJSON(ctxFor(t)); err == nil {
		t.Fatal("SnapshotJSON succeeded")
	}
}

type liveItem struct {
	ID    int               `json:"id"`
	Name  string            `json:"name,omitempty"`
	Tags  []string          `json:"tags"`
	Score float64           `json:"score"`
	Extra map[string]any    `json:"extra,omitempty"`
	Next  *liveItem         `json:"next,omitempty"`
	Attrs map[string]string `json:"attrs"`
}

type liveDoc struct {
	Items   []liveItem          `json:"items"`
	Index   map[string]liveItem `json:"index"`
	Counter int                 `json:"counter"`
	Note    any                 `json:"note"`
}

// A value changed in place, one part at a time, publishes deltas that rebuild it exactly: every
// change anywhere is seen, whether Set re-encodes it from scratch or against the previous text.
func TestLiveStateFollowsInPlaceChanges(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	d := liveDoc{Index: map[string]liveItem{}}
	for i := range 40 {
		it := liveItem{ID: i, Name: fmt.Sprint("n", i), Tags: []string{"a", "b"}, Score: float64(i) / 3, Attrs: map[string]string{"k": "v"}}
		d.Items = append(d.Items, it)
		d.Index[fmt.Sprint("k", i)] = it
	}
	sink := &recSink{}
	l, _ := newLive(sink, d)
	doc := foldstream.JSON(d)
	for step := range 300 {
		i := r.IntN(len(d.Items))
		it := &d.Items[i]
		switch r.IntN(10) {
		case 0:
			d.Counter++
		case 1:
			it.Tags[r.IntN(len(it.Tags))] = fmt.Sprint("t", step) // a shared backing array changed in place
		case 2:
			it.Tags = append(it.Tags, "x")
		case 3:
			it.Name = ""
		case 4:
			it.Score = -it.Score * 1e-7
		case 5:
			it.Attrs[fmt.Sprint("a", r.IntN(3))] = fmt.Sprint(step) // a map changed in place
		case 6:
			d.Index[fmt.Sprint("k", r.IntN(50))] = *it
		case 7:
			delete(d.Index, fmt.Sprint("k", r.IntN(50)))
		case 8:
			it.Next = &liveItem{ID: step, Extra: map[string]any{"n": json.Number("12345678901234567890"), "s": "<&>"}}
		case 9:
			d.Note = []any{step, map[string]any{"x": step % 3}}
		}
		l.Set(d)
		waitLive(t, l)
		for _, fr := range sink.frames() {
			doc = must[json.RawMessage](t)(foldstream.ApplyPatch(doc, foldstream.JSON(fr.Patch)))
		}
		sink.mu.Lock()
		sink.issued = nil
		sink.mu.Unlock()
		if want := foldstream.JSON(d); !rawjson.Equal(doc, want) {
			t.Fatalf("step %d: deltas rebuild %s\nwant %s", step, doc, want)
		}
		held, err := l.SnapshotJSON()
		if want, _ := rawjson.Marshal(d); err != nil || string(held.State) != string(want) {
			t.Fatalf("step %d: held JSON %s (%v), want %s", step, held.State, err, want)
		}
	}
}
