package rawjson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// FuzzDiffIndexed checks the indexed shortcut against the plain diff: identical ops, and an index
// of b identical to a fresh scan.
func FuzzDiffIndexed(f *testing.F) {
	f.Add(`{"a":1,"b":{"c":[1,2]},"d":"x"}`, `{"a":1,"b":{"c":[1,2,3]},"d":"x"}`)
	f.Add(`{"a":"x\",\"b\":1","b":1}`, `{"a":"x","b":1}`)
	f.Add(`{"k":1}`, `{"k":1,"l":2}`)
	f.Add(`{"":[],"0":0}`, `{"":[{}]}`)
	f.Add(`{}`, `{"a":{}}`)
	f.Add(`{"a":1,"b":2,"c":3}`, `{"a":1,"c":3}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var av, bv any
		if json.Unmarshal([]byte(a), &av) != nil || json.Unmarshal([]byte(b), &bv) != nil {
			return
		}
		an, _ := json.Marshal(av)
		bn, _ := json.Marshal(bv)
		aIdx, ok := IndexObject(an)
		if !ok {
			return
		}
		ops, bIdx, ok := DiffIndexed(an, aIdx, bn)
		if !ok {
			return
		}
		want, err := Diff(an, bn)
		if err != nil {
			t.Fatal(err)
		}
		if len(ops) != len(want) || (len(ops) > 0 && !reflect.DeepEqual(ops, want)) {
			t.Fatalf("DiffIndexed(%s, %s) = %v, want %v", an, bn, ops, want)
		}
		fresh, _ := IndexObject(bn)
		if len(fresh) != len(bIdx) || (len(fresh) > 0 && !reflect.DeepEqual(fresh, bIdx)) {
			t.Fatalf("index of %s: got %v, want %v", bn, bIdx, fresh)
		}
	})
}

func TestDiffIndexedHandlesAStringThatSwallowsAMember(t *testing.T) {
	a := []byte(`{"x":"a","k":1}`)
	b := []byte(`{"x":"a\",\"k\":1,\"y\":\"","k":1}`)
	aIdx, _ := IndexObject(a)
	ops, _, ok := DiffIndexed(a, aIdx, b)
	want, _ := Diff(a, b)
	if ok && !reflect.DeepEqual(ops, want) {
		t.Fatalf("got %v, want %v", ops, want)
	}
}

// BenchmarkDiffIndexed is the diff LiveState.Set runs for a ~1 MB object with one changed
// top-level field, given the base's index (compare BenchmarkLiveStateDiff/foldstream, the plain
// Diff on the same kind of document).
func BenchmarkDiffIndexed(b *testing.B) {
	items := map[string]any{}
	for i := range 4400 {
		items[fmt.Sprintf("k%06d", i)] = map[string]any{
			"id": i, "name": "item-with-a-longer-name", "tags": []string{"alpha", "beta", "gamma"}, "score": float64(i) / 7}
	}
	doc := map[string]any{"index": items, "list": []any{items}, "counter": 0}
	before, _ := json.Marshal(doc)
	doc["counter"] = 1
	after, _ := json.Marshal(doc)
	idx, _ := IndexObject(before)
	b.SetBytes(int64(len(after)))
	for range b.N {
		ops, _, ok := DiffIndexed(before, idx, after)
		if !ok || len(ops) != 1 {
			b.Fatalf("ops %v ok %v", ops, ok)
		}
	}
}
