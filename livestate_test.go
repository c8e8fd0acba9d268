package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/testsupport"
)

// recSink records the delta payloads appended to it; hold makes each append wait for a release.
type recSink struct {
	mu      sync.Mutex
	issued  []foldstream.LiveStateDelta
	hold    bool
	release chan struct{}
	fail    error
	panics  bool
}

func (s *recSink) Append(ctx context.Context, evs ...foldstream.EventInput) ([]foldstream.Event, error) {
	for _, e := range evs {
		var d foldstream.LiveStateDelta
		if err := json.Unmarshal(e.Payload, &d); err != nil {
			return nil, err
		}
		if e.Type != foldstream.LiveStateChangedType || !e.Ephemeral {
			return nil, errors.New("not an ephemeral delta")
		}
		s.mu.Lock()
		s.issued = append(s.issued, d)
		s.mu.Unlock()
	}
	if s.panics {
		panic("sink exploded")
	}
	if s.hold {
		<-s.release
	}
	return nil, s.fail
}

func (s *recSink) frames() []foldstream.LiveStateDelta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]foldstream.LiveStateDelta(nil), s.issued...)
}

func newLive(sink foldstream.LiveStateSink, initial any) (*foldstream.LiveState, int64) {
	l := foldstream.NewLiveState(sink, "k", initial, foldstream.LiveStateOptions{Clock: testsupport.NewFakeClock(), Reporter: &siteLog{}})
	return l, l.Snapshot().Rev
}

func waitLive(t *testing.T, l *foldstream.LiveState) {
	t.Helper()
	mustDo(t, l.Wait(ctxFor(t)))
}

func TestP54_DeltasChainAndApply(t *testing.T) {
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

func TestP55_OneAppendChain(t *testing.T) {
	t.Parallel()
	sink := &recSink{hold: true, release: make(chan struct{})}
	l, base := newLive(sink, map[string]int{"n": 0})
	for n := 1; n <= 3; n++ {
		l.Set(map[string]int{"n": n})
	}
	waitFrames := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(sink.frames()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("waited for %d frames, have %d", n, len(sink.frames()))
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // margin: nothing more may be issued while one is pending
		if got := len(sink.frames()); got != n {
			t.Fatalf("issued %d frames while one was pending, want %d", got, n)
		}
	}
	waitFrames(1)
	eq(t, "first to", sink.frames()[0].To, base+1)
	sink.release <- struct{}{}
	waitFrames(2)
	eq(t, "second to", sink.frames()[1].To, base+2)
	sink.release <- struct{}{}
	waitFrames(3)
	eq(t, "third to", sink.frames()[2].To, base+3)
	sink.release <- struct{}{}
	waitLive(t, l)
}

func TestP56_SameValueAgain(t *testing.T) {
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

func TestP57_EqualFreshValue(t *testing.T) {
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

func TestP58_UnserializableValue(t *testing.T) {
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

func TestP59_FailingSinkNeverFailsSet(t *testing.T) {
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
	live := must[foldstream.LiveSnapshot](t)(eng.LiveSnapshot(ctx))
	jsonEq(t, "live state at 1", live.State, `{"n":1}`)
	eq(t, "seen before the live state was published", early.get(), []string(nil))
}
