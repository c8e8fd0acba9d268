package foldstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
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
		doc := applyRecorded(t, foldstream.JSON(vals[0]), sink)
		if !rawjson.Equal(doc, foldstream.JSON(vals[2])) {
			t.Fatalf("chain from %s ends at %s, want %s", s0, doc, foldstream.JSON(vals[2]))
		}
		// The same chain through SetChanged, declaring the members the diff names, or nothing
		// (then the check, at every call, corrects it).
		for _, declare := range []bool{true, false} {
			sink := &recSink{}
			l, _, _ := newLiveChecked(sink, vals[0], 0)
			for i := 1; i < 3; i++ {
				var ptrs []string
				if ops, err := rawjson.Diff(foldstream.JSON(vals[i-1]), foldstream.JSON(vals[i])); err == nil && declare {
					for _, op := range ops {
						ptrs = append(ptrs, strings.TrimSuffix(op.Path, "/-"))
					}
				}
				l.SetChanged(vals[i], ptrs...)
			}
			if err := l.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			doc := applyRecorded(t, foldstream.JSON(vals[0]), sink)
			if !rawjson.Equal(doc, foldstream.JSON(vals[2])) {
				t.Fatalf("SetChanged chain from %s ends at %s, want %s", s0, doc, foldstream.JSON(vals[2]))
			}
			if _, held, _ := heldJSON(l); !bytes.Equal(held, must[[]byte](t)(rawjson.Marshal(vals[2]))) {
				t.Fatalf("SetChanged chain holds %s, want %s", held, foldstream.JSON(vals[2]))
			}
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

// errLog records the sites and errors reported to it.
type errLog struct {
	mu    sync.Mutex
	sites []string
	errs  []error
}

func (r *errLog) Report(_ context.Context, site string, err error, _ ...slog.Attr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sites, r.errs = append(r.sites, site), append(r.errs, err)
}

func (r *errLog) get() ([]string, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sites...), append([]error(nil), r.errs...)
}

// newLiveChecked is newLive with SetChanged checking its declarations at every call, or at most
// once per interval when interval > 0.
func newLiveChecked(sink foldstream.LiveStateSink, initial any, interval time.Duration) (*foldstream.LiveState, *testsupport.FakeClock, *errLog) {
	clock, rep := testsupport.NewFakeClock(), &errLog{}
	if interval == 0 {
		interval = -1
	}
	l := foldstream.NewLiveState(sink, "k", initial, foldstream.LiveStateConfig{Clock: clock, Reporter: rep, VerifyInterval: interval})
	return l, clock, rep
}

// applyFrames applies the frames' patches to doc in order, checking that each starts at the
// revision the previous one ended at.
func applyFrames(t *testing.T, doc json.RawMessage, rev int64, fs []foldtype.LiveStateDelta) (json.RawMessage, int64) {
	t.Helper()
	for _, f := range fs {
		if f.From != rev || f.To != rev+1 {
			t.Fatalf("delta %d→%d after revision %d: the chain is broken", f.From, f.To, rev)
		}
		doc = must[json.RawMessage](t)(foldstream.ApplyPatch(doc, foldstream.JSON(f.Patch)))
		rev = f.To
	}
	return doc, rev
}

func bigLiveDoc(n int) liveDoc {
	d := liveDoc{Index: map[string]liveItem{}}
	for i := range n {
		it := liveItem{ID: i, Name: fmt.Sprint("n", i), Tags: []string{"a", "b"}, Score: float64(i) / 3, Attrs: map[string]string{"k": "v"}}
		d.Items = append(d.Items, it)
		d.Index[fmt.Sprint("k", i)] = it
	}
	return d
}

// The members SetChanged is told of are encoded and published; the patch names only them, and the
// held JSON is exactly the value's.
func TestSetChangedAppliesTheDeclaredChange(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	d := bigLiveDoc(50)
	l, _, rep := newLiveChecked(sink, d, 0)
	seedRev, seed, _ := heldJSON(l)
	d.Counter = 7
	d.Items[3].Name = "renamed"
	d.Index["k9"] = liveItem{ID: 90}
	delete(d.Index, "k10")
	d.Index["new"] = liveItem{ID: 1}
	l.SetChanged(d, "/counter", "/items/3/name", "/index/k9", "/index/k10", "/index/new")
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 {
		t.Fatalf("frames: got %d, want 1", len(fs))
	}
	// Per container in text order; in each, removes first, then additions and changes (Diff's order).
	jsonEq(t, "patch", foldstream.JSON(fs[0].Patch), `[`+
		`{"op":"replace","path":"/counter","value":7},`+
		`{"op":"replace","path":"/items/3/name","value":"renamed"},`+
		`{"op":"remove","path":"/index/k10"},`+
		`{"op":"remove","path":"/index/k9/name"},{"op":"replace","path":"/index/k9/id","value":90},`+
		`{"op":"replace","path":"/index/k9/tags","value":null},{"op":"replace","path":"/index/k9/score","value":0},`+
		`{"op":"replace","path":"/index/k9/attrs","value":null},`+
		`{"op":"add","path":"/index/new","value":{"id":1,"tags":null,"score":0,"attrs":null}}]`)
	doc, rev := applyFrames(t, seed, seedRev, fs)
	want, _ := rawjson.Marshal(d)
	if !rawjson.Equal(doc, want) {
		t.Fatalf("deltas rebuild %s\nwant %s", doc, want)
	}
	gotRev, held, err := heldJSON(l)
	if err != nil || string(held) != string(want) || gotRev != rev {
		t.Fatalf("held %s at %d (%v), want %s at %d", held, gotRev, err, want, rev)
	}
	if sites, _ := rep.get(); len(sites) != 0 {
		t.Fatalf("reported %v for a complete declaration", sites)
	}
}

// A member that changed without being declared is found by the check, corrected in the same
// delta, and reported with code UNDECLARED_CHANGE.
func TestSetChangedCatchesAndCorrectsAnUndeclaredChange(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	d := bigLiveDoc(20)
	l, _, rep := newLiveChecked(sink, d, 0)
	seedRev, seed, _ := heldJSON(l)
	d.Counter = 1
	it := d.Index["k5"]
	it.Name = "undeclared" // changed, not declared
	d.Index["k5"] = it
	l.SetChanged(d, "/counter")
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 {
		t.Fatalf("frames: got %d, want 1", len(fs))
	}
	jsonEq(t, "patch", foldstream.JSON(fs[0].Patch),
		`[{"op":"replace","path":"/counter","value":1},{"op":"replace","path":"/index/k5/name","value":"undeclared"}]`)
	doc, _ := applyFrames(t, seed, seedRev, fs)
	if want := foldstream.JSON(d); !rawjson.Equal(doc, want) {
		t.Fatalf("deltas rebuild %s\nwant %s", doc, want)
	}
	sites, errs := rep.get()
	eq(t, "sites", sites, []string{foldstream.SiteLiveStateUndeclared})
	if !errors.Is(errs[0], foldtype.ErrUndeclaredChange) {
		t.Fatalf("reported %v, want code UNDECLARED_CHANGE", errs[0])
	}
	var fe *foldtype.Error
	if !errors.As(errs[0], &fe) || fmt.Sprint(fe.Data["paths"]) != "[/index/k5/name]" {
		t.Fatalf("reported data %v, want the path /index/k5/name", fe)
	}
}

// Between checks an undeclared change stays unpublished; the next check — on a later call, one
// interval on — corrects it and reports it, even when that call declares nothing.
func TestSetChangedCorrectsAnUndeclaredChangeAtTheNextCheck(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	d := bigLiveDoc(10)
	l, clock, rep := newLiveChecked(sink, d, time.Second)
	seedRev, seed, _ := heldJSON(l)
	d.Counter = 1
	l.SetChanged(d, "/counter") // checked: the first call of an interval
	d.Counter = 2
	d.Note = "undeclared" // and no check is due
	l.SetChanged(d, "/counter")
	waitLive(t, l)
	if sites, _ := rep.get(); len(sites) != 0 {
		t.Fatalf("reported %v before a check was due", sites)
	}
	clock.Advance(time.Second)
	l.SetChanged(d)
	waitLive(t, l)
	fs := sink.frames()
	eq(t, "frames", len(fs), 3)
	jsonEq(t, "correction", foldstream.JSON(fs[2].Patch), `[{"op":"replace","path":"/note","value":"undeclared"}]`)
	doc, _ := applyFrames(t, seed, seedRev, fs)
	if want := foldstream.JSON(d); !rawjson.Equal(doc, want) {
		t.Fatalf("deltas rebuild %s\nwant %s", doc, want)
	}
	sites, _ := rep.get()
	eq(t, "sites", sites, []string{foldstream.SiteLiveStateUndeclared})
	_, held, _ := heldJSON(l)
	eq(t, "held", string(held), string(foldstream.JSON(d)))
}

// Set and SetChanged interleaved, with changes declared exactly, coarsely, or not at all (caught
// by the check at every call), keep one unbroken chain of revisions that rebuilds the value.
func TestSetChangedKeepsTheRevChainIntact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	d := bigLiveDoc(30)
	sink := &recSink{}
	l, _, _ := newLiveChecked(sink, d, 0)
	rev, doc, _ := heldJSON(l)
	for step := range 300 {
		i := r.IntN(len(d.Items))
		it := &d.Items[i]
		var ptrs []string
		switch r.IntN(8) {
		case 0:
			d.Counter++
			ptrs = []string{"/counter"}
		case 1:
			it.Tags = append(it.Tags, "x")
			ptrs = []string{fmt.Sprintf("/items/%d/tags", i)}
		case 2:
			it.Name = ""
			ptrs = []string{fmt.Sprintf("/items/%d", i)}
		case 3:
			k := fmt.Sprint("k", r.IntN(40))
			d.Index[k] = *it
			ptrs = []string{"/index/" + k}
		case 4:
			k := fmt.Sprint("k", r.IntN(40))
			delete(d.Index, k)
			ptrs = []string{"/index/" + k, "/counter"}
		case 5:
			it.Next = &liveItem{ID: step}
			ptrs = []string{fmt.Sprintf("/items/%d/next/id", i)} // a pointer that was nil: widened
		case 6:
			d.Note = map[string]any{"x": step % 3}
			ptrs = []string{"/note/x"}
		case 7:
			d.Items = append(d.Items, liveItem{ID: step})
			ptrs = []string{fmt.Sprintf("/items/%d", len(d.Items)-1)} // beyond the old end: widened
		}
		if r.IntN(5) == 0 {
			l.Set(d)
		} else if r.IntN(6) == 0 {
			l.SetChanged(d) // undeclared: the check corrects it
		} else {
			l.SetChanged(d, ptrs...)
		}
		waitLive(t, l)
		doc, rev = applyFrames(t, doc, rev, sink.frames())
		sink.mu.Lock()
		sink.issued = nil
		sink.mu.Unlock()
		if want := foldstream.JSON(d); !rawjson.Equal(doc, want) {
			t.Fatalf("step %d: deltas rebuild %s\nwant %s", step, doc, want)
		}
		gotRev, held, err := heldJSON(l)
		if want, _ := rawjson.Marshal(d); err != nil || string(held) != string(want) || gotRev != rev {
			t.Fatalf("step %d: held %s at %d (%v), want %s at %d", step, held, gotRev, err, want, rev)
		}
	}
}

// SetChanged of a value whose declared members did not change emits nothing and keeps the
// revision, like Set of an equal value.
func TestSetChangedOfAnEqualValueEmitsNothing(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	d := bigLiveDoc(5)
	l, _, rep := newLiveChecked(sink, d, 0)
	epoch := l.Snapshot().Rev
	l.SetChanged(d, "/counter", "/items/1", "/index/k2/tags")
	l.SetChanged(d)
	fresh := bigLiveDoc(5)
	l.SetChanged(fresh, "/items")
	waitLive(t, l)
	eq(t, "frames", len(sink.frames()), 0)
	eq(t, "rev", l.Snapshot().Rev, epoch)
	if sites, _ := rep.get(); len(sites) != 0 {
		t.Fatalf("reported %v", sites)
	}
}

// A declared member that does not serialize makes SetChanged a Set: the value is held, the
// revision moves, no delta is emitted, and the next change diffs from the last good JSON.
func TestSetChangedOfAnUnserializableMemberIsASet(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	v := map[string]any{"n": 0, "f": 1}
	l, _, _ := newLiveChecked(sink, v, 0)
	epoch := l.Snapshot().Rev
	l.SetChanged(map[string]any{"n": 0, "f": math.NaN()}, "/f")
	waitLive(t, l)
	eq(t, "frames", len(sink.frames()), 0)
	eq(t, "rev", l.Snapshot().Rev, epoch+1)
	l.SetChanged(map[string]any{"n": 1, "f": 1}, "/n")
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 {
		t.Fatalf("frames: got %d, want 1", len(fs))
	}
	jsonEq(t, "patch", foldstream.JSON(fs[0].Patch), `[{"op":"replace","path":"/n","value":1}]`)
	eq(t, "from", fs[0].From, epoch+1)
}

// A declared change whose patch is longer than MaxPatchChars travels as null, like Set's.
func TestSetChangedOversizePatchIsNull(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, _, _ := newLiveChecked(sink, map[string]string{"s": ""}, 0)
	l.SetChanged(map[string]string{"s": strings.Repeat("x", foldstream.MaxPatchChars)}, "/s")
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 || fs[0].Patch != nil {
		t.Fatalf("got %d frames, patch nil=%v; want one null patch", len(fs), len(fs) == 1 && fs[0].Patch == nil)
	}
}

// Set and SetChanged called from several goroutines at once keep one chain that rebuilds the last
// value (the holder reuses an earlier text's buffer only when no Set is reading it).
func TestSetAndSetChangedConcurrentlyKeepTheChain(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, _, _ := newLiveChecked(sink, bigLiveDoc(20), time.Hour)
	rev, doc, _ := heldJSON(l)
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				d := bigLiveDoc(20) // each call its own value: no one changes a value another reads
				d.Counter = g*1000 + i
				if g == 0 {
					l.Set(d)
				} else {
					l.SetChanged(d, "/counter")
				}
			}
		}()
	}
	wg.Wait()
	final := bigLiveDoc(20)
	final.Counter = -1
	l.Set(final)
	waitLive(t, l)
	doc, rev = applyFrames(t, doc, rev, sink.frames())
	want, _ := rawjson.Marshal(final)
	if !rawjson.Equal(doc, want) {
		t.Fatalf("deltas rebuild %s\nwant %s", doc, want)
	}
	gotRev, held, _ := heldJSON(l)
	eq(t, "held", string(held), string(want))
	eq(t, "rev", gotRev, rev)
}

// heldJSON is l.SnapshotJSON as a revision, the JSON and the error.
func heldJSON(l *foldstream.LiveState) (int64, json.RawMessage, error) {
	s, err := l.SnapshotJSON()
	return s.Rev, s.State, err
}

// applyRecorded applies the sink's deltas to doc with applyFrames, their chain starting at the
// first delta's From.
func applyRecorded(t *testing.T, doc json.RawMessage, sink *recSink) json.RawMessage {
	t.Helper()
	fs := sink.frames()
	if len(fs) == 0 {
		return doc
	}
	doc, _ = applyFrames(t, doc, fs[0].From, fs)
	return doc
}

// TestALiveStateStoppedForAHandOverAppendsNoQueuedDelta: once its engine stopped taking work
// before a hand-over (Engine.StopTakingWork), a live state appends neither the deltas still queued
// behind the one in flight nor later ones, so the closing engine waits for one append at most,
// not for a queue of them behind a busy writer. The next owner's live state starts a new chain.
func TestALiveStateStoppedForAHandOverAppendsNoQueuedDelta(t *testing.T) {
	t.Parallel()
	sink := &recSink{hold: true, release: make(chan struct{}), notify: make(chan struct{}, 3)}
	l, base := newLive(sink, map[string]int{"n": 0})
	for n := 1; n <= 3; n++ {
		l.Set(map[string]int{"n": n})
	}
	<-sink.notify // the first delta's append is in flight; two more are queued
	foldstream.StopLivePublishing(l)
	l.Set(map[string]int{"n": 4})
	sink.release <- struct{}{}
	waitLive(t, l)
	got := sink.frames()
	if len(got) != 1 || got[0].To != base+1 {
		t.Fatalf("deltas appended: %+v, want only the one in flight when publishing stopped (to %d)", got, base+1)
	}
}
