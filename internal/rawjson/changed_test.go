package rawjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// declaredFrom returns pointers that name every member whose text differs from a to b, down to the
// deepest object member or array element that differs byte for byte.
func declaredFrom(t *testing.T, a, b []byte) []string {
	t.Helper()
	var out []string
	var walk func(path string, a, b []byte)
	walk = func(path string, a, b []byte) {
		if bytes.Equal(a, b) {
			return
		}
		ka, kb := rawKind(a), rawKind(b)
		switch {
		case ka == '{' && kb == '{':
			am, err1 := objectMembers(a)
			bm, err2 := objectMembers(b)
			if err1 != nil || err2 != nil {
				t.Fatalf("split %s / %s", a, b)
			}
			old := map[string][]byte{}
			for _, m := range am {
				old[m.key] = m.val
			}
			seen := map[string]bool{}
			for _, m := range bm {
				seen[m.key] = true
				if ov, ok := old[m.key]; ok {
					walk(path+"/"+escapePointer(m.key), ov, m.val)
				} else {
					out = append(out, path+"/"+escapePointer(m.key))
				}
			}
			for _, m := range am {
				if !seen[m.key] {
					out = append(out, path+"/"+escapePointer(m.key))
				}
			}
		case ka == '[' && kb == '[':
			ae, _ := arrayElems(a)
			be, _ := arrayElems(b)
			if len(ae) != len(be) {
				out = append(out, path)
				return
			}
			for i := range ae {
				walk(path+"/"+strconv.Itoa(i), ae[i], be[i])
			}
		default:
			out = append(out, path)
		}
	}
	walk("", a, b)
	return out
}

// checkChanged asserts that EncodeChanged, told the members that changed, gives exactly Marshal's
// text, a patch that turns the old text into it, and the index IndexObject gives. It reports
// whether the update was made in place.
func checkChanged(t *testing.T, prevText []byte, prevType reflect.Type, next any, changed []string) bool {
	t.Helper()
	want, err := Marshal(next)
	if err != nil {
		return false
	}
	idx, indexed := IndexObject(prevText)
	res, ok := EncodeChanged(next, prevText, prevType, idx, indexed, changed, make([]byte, 0, 64))
	if !ok {
		return false
	}
	if !bytes.Equal(res.Text, want) {
		t.Fatalf("EncodeChanged %q\n from %s\n gave %s\n want %s", changed, prevText, res.Text, want)
	}
	patch, _ := json.Marshal(res.Ops)
	if len(res.Ops) == 0 {
		patch = []byte("[]")
	}
	applied, err := Apply(prevText, patch)
	if err != nil || !Equal(applied, want) {
		t.Fatalf("patch %s\n on %s\n gave %s (%v)\n want %s", patch, prevText, applied, err, want)
	}
	wantIdx, wantIndexed := IndexObject(want)
	if res.Indexed != wantIndexed || res.Indexed && !reflect.DeepEqual(res.Index, wantIdx) && !(len(res.Index) == 0 && len(wantIdx) == 0) {
		t.Fatalf("index of %s\n got %+v\n want %+v", want, res.Index, wantIdx)
	}
	return true
}

// extraPointers are declarations of members that may not have changed (declaring more than changed
// is allowed) and of members that do not exist.
var extraPointers = []string{"/counter", "/items/0", "/items/0/name", "/items/1/tags/0", "/index/i3",
	"/index/i3/score", "/any", "/any/a", "/any/0", "/nonexistent", "/items/999", "/items/-", "/items/x",
	"/index/i1/ptr/id", "/items/0/m/x/id", "/items/0/iface/a", "/items/0/custom/v", "/items/0/emb/b"}

// A value changed in place step by step, with its changes declared (exactly, more coarsely, or
// with extra members), encodes at every step to exactly Marshal's output.
func TestEncodeChangedFollowsDeclaredChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	inPlace := 0
	for run := range 60 {
		d := reDoc{Index: map[string]reItem{}}
		for range 5 {
			mutate(r, &d)
		}
		prev, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 20 {
			for range 1 + r.IntN(3) {
				mutate(r, &d)
			}
			want, err := Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			declared := declaredFrom(t, prev, want)
			variants := [][]string{declared}
			var coarse []string
			for _, p := range declared {
				if i := strings.LastIndexByte(p, '/'); i > 0 {
					p = p[:i]
				}
				coarse = append(coarse, p)
			}
			variants = append(variants, coarse)
			extra := append([]string(nil), declared...)
			for range 3 {
				extra = append(extra, extraPointers[r.IntN(len(extraPointers))])
			}
			variants = append(variants, extra)
			for _, v := range variants {
				if checkChanged(t, prev, reflect.TypeOf(d), d, v) {
					inPlace++
				}
			}
			_ = run
			_ = step
			prev = want
		}
	}
	t.Logf("in place: %d", inPlace)
	if inPlace < 1000 {
		t.Fatalf("only %d updates were made in place", inPlace)
	}
}

// Members added to and removed from a struct (omitempty) and a map, several in one container, keep
// encoding/json's order and separators.
func TestEncodeChangedAddsAndRemovesMembers(t *testing.T) {
	type inner struct {
		A int            `json:"a,omitempty"`
		B string         `json:"b,omitempty"`
		C []int          `json:"c,omitempty"`
		M map[string]int `json:"m,omitempty"`
	}
	type top struct {
		X  int              `json:"x,omitempty"`
		In inner            `json:"in"`
		M  map[string]inner `json:"m"`
		Z  int              `json:"z,omitempty"`
	}
	keys := []string{"a", "b", "c", "d", "e", "<&>", "~/x"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		v := top{M: map[string]inner{}}
		step := func() []string {
			var ps []string
			for range 1 + r.IntN(4) {
				k := keys[r.IntN(len(keys))]
				switch r.IntN(7) {
				case 0:
					v.X = r.IntN(2)
					ps = append(ps, "/x")
				case 1:
					v.Z = r.IntN(2)
					ps = append(ps, "/z")
				case 2:
					v.In.A, v.In.B = r.IntN(2), []string{"", "b"}[r.IntN(2)]
					ps = append(ps, "/in/a", "/in/b")
				case 3:
					if v.In.M == nil {
						v.In.M = map[string]int{}
					}
					v.In.M[k] = r.IntN(2)
					ps = append(ps, "/in/m/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
				case 4:
					delete(v.In.M, k)
					ps = append(ps, "/in/m/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
				case 5:
					v.M[k] = inner{A: r.IntN(3)}
					ps = append(ps, "/m/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
				case 6:
					delete(v.M, k)
					ps = append(ps, "/m/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
				}
			}
			return ps
		}
		prev, _ := Marshal(v)
		for range 10 {
			ps := step()
			checkChanged(t, prev, reflect.TypeOf(v), v, ps)
			prev, _ = Marshal(v)
		}
	}
}

// A pointer that cannot be followed (the root, a MarshalJSON type, a bad pointer) gives up rather
// than guessing; a value whose declared member does not encode gives up too.
func TestEncodeChangedGivesUpRatherThanGuess(t *testing.T) {
	d := reDoc{Counter: 1, Index: map[string]reItem{}}
	prev, _ := Marshal(d)
	idx, indexed := IndexObject(prev)
	for _, p := range []string{"", "counter", "/"} {
		if _, ok := EncodeChanged(d, prev, reflect.TypeOf(d), idx, indexed, []string{p}, nil); ok {
			t.Errorf("pointer %q: made in place, want a give-up", p)
		}
	}
	if _, ok := EncodeChanged(reCustom{V: 2}, []byte(`{"v":1}`), reflect.TypeOf(reCustom{}), nil, false, []string{"/v"}, nil); ok {
		t.Error("MarshalJSON root: made in place, want a give-up")
	}
	type withFunc struct {
		F any `json:"f"`
	}
	prev, _ = Marshal(withFunc{F: 1})
	idx, indexed = IndexObject(prev)
	if _, ok := EncodeChanged(withFunc{F: func() {}}, prev, reflect.TypeFor[withFunc](), idx, indexed, []string{"/f"}, nil); ok {
		t.Error("unencodable member: made in place, want a give-up")
	}
}

// FuzzEncodeChangedMatchesMarshal decodes two JSON texts into typed and untyped values and checks
// that updating the first's encoding with the members the diff names gives exactly Marshal's text.
func FuzzEncodeChangedMatchesMarshal(f *testing.F) {
	f.Add(`{"items":[{"id":1,"tags":["a"]}],"counter":1}`, `{"items":[{"id":1,"tags":["a","b"]}],"counter":2}`)
	f.Add(`{"index":{"a":{"id":1},"b":{"id":2}}}`, `{"index":{"a":{"id":1},"c":{"id":2}}}`)
	f.Add(`{"items":[{"name":"x","any":{"k":[1,2,{"z":null}]}}]}`, `{"items":[{"any":{"k":[1,2,{"z":"\u2028<"}]}}]}`)
	f.Add(`{"any":[1,2,3]}`, `{"any":[1]}`)
	f.Add(`{"items":[{"m":{"x":{"id":1}},"ptr":{"id":2}}]}`, `{"items":[{"m":{"x":{"id":3}},"ptr":null}]}`)
	f.Add(`{"a":1,"b":{"c":[1,{"d":2}]}}`, `{"b":{"c":[1,{"d":3,"e":4}]},"f":5}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var da, db reDoc
		_ = json.Unmarshal([]byte(a), &da)
		_ = json.Unmarshal([]byte(b), &db)
		check := func(prev, next any) {
			pt, err := Marshal(prev)
			if err != nil {
				return
			}
			nt, err := Marshal(next)
			if err != nil {
				return
			}
			ptrs := declaredFrom(t, pt, nt)
			checkChanged(t, pt, reflect.TypeOf(prev), next, ptrs)
			checkChanged(t, pt, reflect.TypeOf(prev), next, append(ptrs, extraPointers...))
		}
		check(da, db)
		var ua, ub any
		_ = json.Unmarshal([]byte(a), &ua)
		_ = json.Unmarshal([]byte(b), &ub)
		check(ua, ub)
		check(ua, db)
		check(da, ub)
	})
}
