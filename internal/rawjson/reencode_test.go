package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

type reCustom struct{ V int }

func (c reCustom) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{ "v" : %d, "s":"<&>" }`, c.V), nil
}

type rePtrCustom struct{ V int }

func (c *rePtrCustom) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, `"ptr-%d"`, c.V), nil }

type reText int

func (t reText) MarshalText() ([]byte, error) { return fmt.Appendf(nil, "t%d", int(t)), nil }

type reKey string

func (k reKey) MarshalText() ([]byte, error) { return []byte("never used: string keys win"), nil }

type reBase struct {
	B int `json:"b"`
}

type reEmbedded struct {
	reBase
	C string `json:"c"`
}

type reItem struct {
	ID     int64                  `json:"id"`
	Name   string                 `json:"name,omitempty"`
	Tags   []string               `json:"tags"`
	Score  float64                `json:"score"`
	F32    float32                `json:"f32,omitempty"`
	Ptr    *reItem                `json:"ptr,omitempty"`
	Any    any                    `json:"any"`
	Num    json.Number            `json:"num,omitempty"`
	Custom reCustom               `json:"custom"`
	PtrC   rePtrCustom            `json:"ptrc"`
	PtrCP  *rePtrCustom           `json:"ptrcp"`
	Text   reText                 `json:"text"`
	Bytes  []byte                 `json:"bytes,omitempty"`
	Arr    [2]uint8               `json:"arr"`
	M      map[string]*reItem     `json:"m,omitempty"`
	IntKey map[int]string         `json:"intKey,omitempty"`
	KeyT   map[reKey]int          `json:"keyT,omitempty"`
	U      uint64                 `json:"u"`
	Emb    reEmbedded             `json:"emb"`
	Str    int                    `json:"str,string"`
	Skip   int                    `json:"-"`
	Raw    json.RawMessage        `json:"raw,omitempty"`
	Iface  map[string]interface{} `json:"iface"`
	NoTag  bool
	hidden int
}

type reDoc struct {
	Items   []reItem          `json:"items"`
	Index   map[string]reItem `json:"index"`
	Counter int               `json:"counter"`
	Any     any               `json:"any,omitempty"`
}

// checkReencode asserts Reencode(next, Marshal(prev)) is exactly Marshal(next), and that same
// tells the truth.
func checkReencode(t *testing.T, prev, next any) []byte {
	t.Helper()
	pb, err := Marshal(prev)
	if err != nil {
		pb = nil
	}
	want, wantErr := Marshal(next)
	got, same, err := Reencode(next, pb, reflect.TypeOf(prev))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Reencode error %v, Marshal error %v", err, wantErr)
	}
	if err != nil {
		return nil
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Reencode\n from %s\n gave %s\n want %s", pb, got, want)
	}
	if same != (pb != nil && bytes.Equal(pb, want)) {
		t.Fatalf("same = %v for %s → %s", same, pb, want)
	}
	// Into a reused buffer full of other bytes, with the spliced window reported.
	buf := bytes.Repeat([]byte{'#'}, len(want)+8)
	r, err := ReencodeTo(buf, next, pb, reflect.TypeOf(prev))
	if err != nil || !bytes.Equal(r.Text, want) || r.Same != same {
		t.Fatalf("ReencodeTo gave %s (same %v, %v), want %s", r.Text, r.Same, err, want)
	}
	if r.Prefix+r.Suffix > min(len(pb), len(want)) && !r.Same ||
		!bytes.Equal(pb[:min(r.Prefix, len(pb))], want[:min(r.Prefix, len(want))]) ||
		!bytes.HasSuffix(pb, want[len(want)-min(r.Suffix, len(want)):]) {
		t.Fatalf("ReencodeTo window prefix %d suffix %d is not common to %s and %s", r.Prefix, r.Suffix, pb, want)
	}
	return got
}

// FuzzReencodeMatchesMarshal decodes two JSON texts into typed and untyped Go values and checks
// that re-encoding the second against the first's encoding gives exactly what Marshal gives.
func FuzzReencodeMatchesMarshal(f *testing.F) {
	f.Add(`{"items":[{"id":1,"tags":["a"]}],"counter":1}`, `{"items":[{"id":1,"tags":["a","b"]}],"counter":2}`)
	f.Add(`{"index":{"a":{"id":1},"b":{"id":2}}}`, `{"index":{"a":{"id":1},"c":{"id":2}}}`)
	f.Add(`{"items":[{"name":"x","any":{"k":[1,2,{"z":null}]}}]}`, `{"items":[{"any":{"k":[1,2,{"z":"\u2028<"}]}}]}`)
	f.Add(`{"items":[{"num":"12","score":1e21,"f32":0.1}]}`, `{"items":[{"num":"12.0","score":1e-7,"f32":0.2}]}`)
	f.Add(`{"any":[1,2,3]}`, `{"any":[1]}`)
	f.Add(`{"any":"a\"b"}`, `{"any":"a\\"}`)
	f.Add(`{"items":[{"m":{"x":{"id":1}},"ptr":{"id":2}}]}`, `{"items":[{"m":{"x":{"id":3}},"ptr":null}]}`)
	f.Add(`{"items":[{"intKey":{"1":"a"},"keyT":{"z":1},"iface":{"a":1}}]}`, `{"items":[{"intKey":{"1":"b"},"keyT":{"z":2},"iface":{"a":1,"b":2}}]}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var da, db reDoc
		_ = json.Unmarshal([]byte(a), &da) // a partly decoded value is as good a test value
		_ = json.Unmarshal([]byte(b), &db)
		out := checkReencode(t, da, db)
		if out != nil { // a chain: re-encode the first value against the second's result
			got, _, err := Reencode(da, out, reflect.TypeOf(db))
			want, _ := Marshal(da)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("chain back: got %s, %v, want %s", got, err, want)
			}
		}
		var ua, ub any
		_ = json.Unmarshal([]byte(a), &ua)
		_ = json.Unmarshal([]byte(b), &ub)
		checkReencode(t, ua, ub)
		checkReencode(t, ua, db)
		checkReencode(t, da, ub)
	})
}

func randItem(r *rand.Rand, depth int) reItem {
	it := reItem{ID: r.Int64N(1 << 62), Score: float64(r.IntN(1000)) / 7, U: r.Uint64(), Str: r.IntN(3)}
	if r.IntN(2) == 0 {
		it.Name = "n" + strconv.Itoa(r.IntN(5))
	}
	for range r.IntN(3) {
		it.Tags = append(it.Tags, []string{"a", "b\"", "<c>", "é", "\u2028", "\x01"}[r.IntN(6)])
	}
	if depth < 2 && r.IntN(3) == 0 {
		p := randItem(r, depth+1)
		it.Ptr = &p
	}
	it.Any = randAny(r, 2)
	it.Num = json.Number([]string{"", "1", "1.50", "-0", "12345678901234567890123"}[r.IntN(5)])
	it.Custom.V, it.PtrC.V, it.Text = r.IntN(3), r.IntN(3), reText(r.IntN(3))
	if r.IntN(2) == 0 {
		it.PtrCP = &rePtrCustom{V: r.IntN(3)}
	}
	if r.IntN(3) == 0 {
		it.Bytes = []byte{byte(r.IntN(256))}
	}
	it.Arr = [2]uint8{uint8(r.IntN(3)), 0}
	if depth < 2 && r.IntN(3) == 0 {
		it.M = map[string]*reItem{}
		for range r.IntN(3) {
			if r.IntN(4) == 0 {
				it.M["k"+strconv.Itoa(r.IntN(4))] = nil
			} else {
				c := randItem(r, depth+1)
				it.M["k"+strconv.Itoa(r.IntN(4))] = &c
			}
		}
	}
	if r.IntN(3) == 0 {
		it.IntKey = map[int]string{r.IntN(20): "v", -r.IntN(20): "w"}
		it.KeyT = map[reKey]int{reKey("q" + strconv.Itoa(r.IntN(3))): 1}
	}
	it.Emb = reEmbedded{reBase{r.IntN(2)}, "c"}
	if r.IntN(3) == 0 {
		it.Raw = json.RawMessage(`{ "raw" : [1, 2] }`)
	}
	if r.IntN(2) == 0 {
		it.Iface = map[string]any{"x": randAny(r, 1), "y\\": 1}
	}
	it.NoTag = r.IntN(2) == 0
	it.F32 = float32(r.IntN(4)) / 3
	return it
}

func randAny(r *rand.Rand, depth int) any {
	switch n := r.IntN(10); {
	case n == 0:
		return nil
	case n == 1:
		return r.IntN(2) == 0
	case n == 2:
		return []float64{0, math.Copysign(0, -1), 1e21, 1e-7, 123456789.125, 1.5e300, 3}[r.IntN(7)]
	case n == 3:
		return "s" + strconv.Itoa(r.IntN(3))
	case n == 4:
		return int64(9007199254740992 + r.IntN(3))
	case n == 5 && depth > 0:
		m := map[string]any{}
		for range r.IntN(4) {
			m[[]string{"a", "b", "~/", "ü", ""}[r.IntN(5)]] = randAny(r, depth-1)
		}
		return m
	case n == 6 && depth > 0:
		var s []any
		for range r.IntN(4) {
			s = append(s, randAny(r, depth-1))
		}
		return s
	case n == 7:
		return reCustom{V: r.IntN(2)}
	case n == 8:
		return &rePtrCustom{V: r.IntN(2)}
	}
	return float32(r.IntN(5)) / 3
}

// mutate changes one random part of d in place (the way a processor's projection changes).
func mutate(r *rand.Rand, d *reDoc) {
	switch r.IntN(9) {
	case 0:
		d.Counter = r.IntN(5)
	case 1:
		if len(d.Items) > 0 {
			i := r.IntN(len(d.Items))
			d.Items[i] = randItem(r, 0)
		}
	case 2:
		d.Items = append(d.Items, randItem(r, 0))
	case 3:
		if len(d.Items) > 0 {
			d.Items = d.Items[:r.IntN(len(d.Items))]
		}
	case 4:
		d.Index["i"+strconv.Itoa(r.IntN(30))] = randItem(r, 0)
	case 5:
		delete(d.Index, "i"+strconv.Itoa(r.IntN(30)))
	case 6:
		if len(d.Items) > 0 {
			it := &d.Items[r.IntN(len(d.Items))]
			it.Tags = append(it.Tags, "t")
			it.Score += 0.1
			it.Any = randAny(r, 2)
		}
	case 7:
		d.Any = randAny(r, 3)
	case 8:
		if len(d.Items) > 0 {
			it := &d.Items[r.IntN(len(d.Items))]
			it.Name, it.F32, it.Ptr = "", 0, nil
			it.PtrC.V++
		}
	}
}

// A value changed in place step by step re-encodes, at every step, to exactly Marshal's output.
func TestReencodeFollowsInPlaceChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 40 {
		d := reDoc{Index: map[string]reItem{}}
		for range 5 {
			mutate(r, &d)
		}
		prev, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 50 {
			mutate(r, &d)
			want, err := Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			got, same, err := Reencode(d, prev, reflect.TypeOf(d))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("run %d step %d: got %s (%v)\nwant %s", run, step, got, err, want)
			}
			if same != bytes.Equal(prev, want) {
				t.Fatalf("run %d step %d: same=%v", run, step, same)
			}
			prev = got
		}
	}
}

// The walk gives up, and Marshal's answer stands, for values JSON cannot hold and for pointer cycles.
func TestReencodeErrorsAreMarshalErrors(t *testing.T) {
	prev, _ := Marshal(map[string]any{"f": 1})
	if _, _, err := Reencode(map[string]any{"f": math.Inf(1)}, prev, nil); err == nil {
		t.Error("an infinity encoded")
	}
	if _, _, err := Reencode(map[string]any{"f": func() {}}, prev, nil); err == nil {
		t.Error("a func encoded")
	}
	type cyc struct {
		F *cyc `json:"f"`
	}
	c := &cyc{}
	c.F = c
	if _, _, err := Reencode(c, []byte(`{"f":null}`), reflect.TypeOf(c)); err == nil {
		t.Error("a cycle encoded")
	}
}

type benchItem struct {
	ID    int      `json:"id"`
	Name  string   `json:"name"`
	Tags  []string `json:"tags"`
	Score float64  `json:"score"`
}

type benchDoc struct {
	Items   []benchItem          `json:"items"`
	Index   map[string]benchItem `json:"index"`
	Counter int                  `json:"counter"`
}

// BenchmarkReencode re-encodes a ~1 MB value of which one field changed, against Marshal of it.
//
//	go test -run '^$' -bench Reencode ./internal/rawjson
func BenchmarkReencode(b *testing.B) {
	d := benchDoc{Index: map[string]benchItem{}}
	for i := range 4400 {
		it := benchItem{ID: i, Name: fmt.Sprintf("item-%06d-with-a-longer-name", i), Tags: []string{"alpha", "beta", "gamma"}, Score: float64(i) / 7}
		d.Items = append(d.Items, it)
		d.Index[fmt.Sprintf("k%06d", i)] = it
	}
	prev, _ := Marshal(d)
	b.Run("reencode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(prev)))
		for i := range b.N {
			d.Counter = i + 1
			if _, _, err := Reencode(d, prev, reflect.TypeOf(d)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(prev)))
		for i := range b.N {
			d.Counter = i + 1
			if _, err := Marshal(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A float is compared by value only where the old text was written from a float of the same type;
// after other number text ("1.50", a uint64 beyond 2^53) the float's own text is written.
func TestReencodeFloatAfterOtherNumberText(t *testing.T) {
	type numDoc struct {
		F json.Number `json:"f"`
	}
	type floatDoc struct {
		F float64 `json:"f"`
	}
	type uintDoc struct {
		F uint64 `json:"f"`
	}
	for _, c := range []struct{ prev, next any }{
		{map[string]any{"f": json.Number("1.50")}, map[string]any{"f": 1.5}},
		{[]any{json.Number("1e2")}, []any{100.0}},
		{numDoc{"0.10000000000000001"}, floatDoc{0.1}},
		{uintDoc{math.MaxUint64}, floatDoc{math.MaxUint64}},
		{floatDoc{0.1}, floatDoc{0.1}},
		{floatDoc{math.Copysign(0, -1)}, floatDoc{0}},
		{[]float32{0.1}, []float64{float64(float32(0.1))}},
	} {
		checkReencode(t, c.prev, c.next)
	}
}

// A value of many custom-marshalled leaves is marshalled whole once the walk has met maxOpaque of
// them; the text is Marshal's either way.
func TestReencodeManyOpaqueValues(t *testing.T) {
	prevVal := make([]reCustom, maxOpaque+10)
	prev, _ := Marshal(prevVal)
	next := make([]reCustom, len(prevVal))
	next[len(next)-1].V = 1
	got, same, err := Reencode(next, prev, reflect.TypeOf(next))
	want, _ := Marshal(next)
	if err != nil || same || !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, same %v, err %v; want Marshal's %d bytes", len(got), same, err, len(want))
	}
	got, same, err = Reencode(prevVal, prev, reflect.TypeOf(prevVal))
	if err != nil || !same || !bytes.Equal(got, prev) {
		t.Fatalf("unchanged value: %d bytes, same %v, err %v", len(got), same, err)
	}
}
