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

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/foldstream/foldstream"
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

func TestDiffJSON_SpecRules(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, a, b, want string }{
		{"equal", `{"a":1}`, `{"a":1.0}`, `null`},
		{"scalar", `{"a":1}`, `{"a":2}`, `[{"op":"replace","path":"/a","value":2}]`},
		{"type change", `{"a":1}`, `{"a":"1"}`, `[{"op":"replace","path":"/a","value":"1"}]`},
		{"remove then add", `{"a":1,"b":2}`, `{"b":2,"c":3}`, `[{"op":"remove","path":"/a"},{"op":"add","path":"/c","value":3}]`},
		{"key order irrelevant", `{"a":1,"b":{"x":1,"y":2}}`, `{"b":{"y":2,"x":1},"a":1}`, `null`},
		{"append", `{"l":[1,2]}`, `{"l":[1,2,3,4]}`, `[{"op":"add","path":"/l/-","value":3},{"op":"add","path":"/l/-","value":4}]`},
		{"tail removes", `{"l":[1,2,3,4]}`, `{"l":[1,2]}`, `[{"op":"remove","path":"/l/3"},{"op":"remove","path":"/l/2"}]`},
		{"array replace", `{"l":[1,2,3]}`, `{"l":[1,9,3]}`, `[{"op":"replace","path":"/l","value":[1,9,3]}]`},
		{"nested", `{"a":{"b":{"c":1,"d":[1]}}}`, `{"a":{"b":{"c":2,"d":[1]}}}`, `[{"op":"replace","path":"/a/b/c","value":2}]`},
		{"pointer escape", `{"a/b":1,"c~d":1}`, `{"a/b":2,"c~d":2}`, `[{"op":"replace","path":"/a~1b","value":2},{"op":"replace","path":"/c~0d","value":2}]`},
		{"root", `1`, `{"a":1}`, `[{"op":"replace","path":"","value":{"a":1}}]`},
		{"null value", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null}]`},
	}
	for _, c := range cases {
		ops, err := foldstream.DiffJSON([]byte(c.a), []byte(c.b))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := string(foldstream.JSON(ops)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
		if len(ops) > 0 {
			out := must[json.RawMessage](t)(foldstream.ApplyPatch(json.RawMessage(c.a), foldstream.JSON(ops)))
			jsonEq(t, c.name+" applied", out, c.b)
		}
	}
}

func TestApplyPatch_Refusals(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`[{"op":"add","path":"/__proto__/x","value":1}]`,
		`[{"op":"remove","path":""}]`,
		`[{"op":"replace","path":"/missing/x","value":1}]`,
	} {
		if _, err := foldstream.ApplyPatch(json.RawMessage(`{"a":1}`), json.RawMessage(p)); err == nil {
			t.Errorf("%s: applied, want an error", p)
		}
	}
	for _, c := range []struct{ doc, patch, want string }{
		{`{"l":[1,3]}`, `[{"op":"add","path":"/l/1","value":2}]`, `{"l":[1,2,3]}`},
		{`{"l":[1,3]}`, `[{"op":"add","path":"/l/2","value":4}]`, `{"l":[1,3,4]}`},
		{`{"":[]}`, `[{"op":"add","path":"//-","value":{}}]`, `{"":[{}]}`},
		{`{"a/b":{"c~d":1}}`, `[{"op":"replace","path":"/a~1b/c~0d","value":2}]`, `{"a/b":{"c~d":2}}`},
		{`{"n":12345678901234567890}`, `[{"op":"add","path":"/m","value":1}]`, `{"n":12345678901234567890,"m":1}`},
		{`{"l":[1,2,3]}`, `[{"op":"remove","path":"/l/0"}]`, `{"l":[2,3]}`},
	} {
		out := must[json.RawMessage](t)(foldstream.ApplyPatch(json.RawMessage(c.doc), json.RawMessage(c.patch)))
		jsonEq(t, c.patch, out, c.want)
	}
	for _, p := range []string{
		`[{"op":"add","path":"/l/01","value":1}]`,
		`[{"op":"add","path":"/l/9","value":1}]`,
		`[{"op":"remove","path":"/l/-"}]`,
		`[{"op":"add","path":"/a/b","value":1}]`,
		`[{"op":"move","path":"/a"}]`,
		`[{"op":"add","path":"a","value":1}]`,
	} {
		if _, err := foldstream.ApplyPatch(json.RawMessage(`{"a":1,"l":[]}`), json.RawMessage(p)); err == nil {
			t.Errorf("%s: applied, want an error", p)
		}
	}
}

func FuzzDiffJSON(f *testing.F) {
	f.Add(`{"a":1,"b":[1,2]}`, `{"b":[1,2,3],"c":"x"}`)
	f.Add(`[1,{"a":"\"}"}]`, `[1]`)
	f.Add(`{"a\\/b":{"x":[]}}`, `{"a\\/b":{"x":[null,true]}}`)
	f.Add(`"s"`, `2.5e3`)
	f.Fuzz(func(t *testing.T, a, b string) {
		_, _ = foldstream.DiffJSON([]byte(a), []byte(b)) // raw, possibly malformed input must not panic
		var av, bv any
		if json.Unmarshal([]byte(a), &av) != nil || json.Unmarshal([]byte(b), &bv) != nil {
			return
		}
		// Normalize like the live state does: the encoder's output.
		an, err1 := json.Marshal(av)
		bn, err2 := json.Marshal(bv)
		if err1 != nil || err2 != nil {
			return
		}
		ops, err := foldstream.DiffJSON(an, bn)
		if err != nil {
			t.Fatalf("DiffJSON(%s, %s): %v", an, bn, err)
		}
		if (len(ops) == 0) != foldstream.JSONEqual(av, bv) {
			t.Fatalf("DiffJSON(%s, %s) = %v, but JSONEqual = %v", an, bn, ops, foldstream.JSONEqual(av, bv))
		}
		if len(ops) == 0 {
			return
		}
		out, err := foldstream.ApplyPatch(an, foldstream.JSON(ops))
		if err != nil {
			t.Fatalf("apply %s to %s: %v", foldstream.JSON(ops), an, err)
		}
		var ov any
		if err := json.Unmarshal(out, &ov); err != nil || !foldstream.JSONEqual(ov, bv) {
			t.Fatalf("apply(%s, diff) = %s, want %s", an, out, bn)
		}
		// Oracle: evanphx/json-patch agrees wherever no pointer has an empty key segment (which
		// that library mishandles).
		for _, op := range ops {
			if strings.Contains(op.Path+"/", "//") {
				return
			}
		}
		if p, err := jsonpatch.DecodePatch(foldstream.JSON(ops)); err == nil {
			if o2, err := p.Apply(an); err == nil {
				var v2 any
				if json.Unmarshal(o2, &v2) != nil || !foldstream.JSONEqual(v2, bv) {
					t.Fatalf("oracle: evanphx apply(%s, %s) = %s, want %s", an, foldstream.JSON(ops), o2, bn)
				}
			}
		}
	})
}

func FuzzApplyPatch(f *testing.F) {
	f.Add(`{"a":[1,2]}`, `[{"op":"add","path":"/a/-","value":3}]`)
	f.Add(`{"":{"":1}}`, `[{"op":"remove","path":"//"}]`)
	f.Add(`[1]`, `[{"op":"replace","path":"/0","value":{"x":[]}}]`)
	f.Fuzz(func(t *testing.T, doc, patch string) {
		out, err := foldstream.ApplyPatch(json.RawMessage(doc), json.RawMessage(patch))
		if err == nil && !json.Valid(out) {
			t.Fatalf("ApplyPatch(%s, %s) = %s: invalid JSON", doc, patch, out)
		}
	})
}
