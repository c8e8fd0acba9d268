package rawjson_test

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/foldstream/foldstream/internal/rawjson"
)

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func mustApply(t *testing.T, doc, patch json.RawMessage) json.RawMessage {
	t.Helper()
	out, err := rawjson.Apply(doc, patch)
	if err != nil {
		t.Fatalf("apply %s to %s: %v", patch, doc, err)
	}
	return out
}

func jsonEq(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if !rawjson.Equal(got, []byte(want)) {
		t.Errorf("%s: got %s, want %s", what, got, want)
	}
}

func TestDiffFollowsThePatchRules(t *testing.T) {
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
		ops, err := rawjson.Diff([]byte(c.a), []byte(c.b))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := string(mustJSON(ops)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
		if len(ops) > 0 {
			out := mustApply(t, json.RawMessage(c.a), mustJSON(ops))
			jsonEq(t, c.name+" applied", out, c.b)
		}
	}
}

func TestApplyRefusesAndInserts(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`[{"op":"add","path":"/__proto__/x","value":1}]`,
		`[{"op":"remove","path":""}]`,
		`[{"op":"replace","path":"/missing/x","value":1}]`,
	} {
		if _, err := rawjson.Apply(json.RawMessage(`{"a":1}`), json.RawMessage(p)); err == nil {
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
		out := mustApply(t, json.RawMessage(c.doc), json.RawMessage(c.patch))
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
		if _, err := rawjson.Apply(json.RawMessage(`{"a":1,"l":[]}`), json.RawMessage(p)); err == nil {
			t.Errorf("%s: applied, want an error", p)
		}
	}
}

func FuzzDiff(f *testing.F) {
	f.Add(`{"a":1,"b":[1,2]}`, `{"b":[1,2,3],"c":"x"}`)
	f.Add(`[1,{"a":"\"}"}]`, `[1]`)
	f.Add(`{"a\\/b":{"x":[]}}`, `{"a\\/b":{"x":[null,true]}}`)
	f.Add(`"s"`, `2.5e3`)
	f.Fuzz(func(t *testing.T, a, b string) {
		_, _ = rawjson.Diff([]byte(a), []byte(b)) // raw, possibly malformed input must not panic
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
		ops, err := rawjson.Diff(an, bn)
		if err != nil {
			t.Fatalf("Diff(%s, %s): %v", an, bn, err)
		}
		if (len(ops) == 0) != rawjson.Equal(an, bn) {
			t.Fatalf("Diff(%s, %s) = %v, but Equal = %v", an, bn, ops, rawjson.Equal(an, bn))
		}
		if len(ops) == 0 {
			return
		}
		out, err := rawjson.Apply(an, mustJSON(ops))
		if err != nil {
			t.Fatalf("apply %s to %s: %v", mustJSON(ops), an, err)
		}
		var ov any
		if err := json.Unmarshal(out, &ov); err != nil || !rawjson.Equal(out, bn) {
			t.Fatalf("apply(%s, diff) = %s, want %s", an, out, bn)
		}
		// Oracle: evanphx/json-patch agrees wherever no pointer has an empty key segment (which
		// that library mishandles).
		for _, op := range ops {
			if strings.Contains(op.Path+"/", "//") {
				return
			}
		}
		if p, err := jsonpatch.DecodePatch(mustJSON(ops)); err == nil {
			if o2, err := p.Apply(an); err == nil {
				var v2 any
				if json.Unmarshal(o2, &v2) != nil || !rawjson.Equal(o2, bn) {
					t.Fatalf("oracle: evanphx apply(%s, %s) = %s, want %s", an, mustJSON(ops), o2, bn)
				}
			}
		}
	})
}

func FuzzApply(f *testing.F) {
	f.Add(`{"a":[1,2]}`, `[{"op":"add","path":"/a/-","value":3}]`)
	f.Add(`{"":{"":1}}`, `[{"op":"remove","path":"//"}]`)
	f.Add(`[1]`, `[{"op":"replace","path":"/0","value":{"x":[]}}]`)
	f.Fuzz(func(t *testing.T, doc, patch string) {
		out, err := rawjson.Apply(json.RawMessage(doc), json.RawMessage(patch))
		if err == nil && !json.Valid(out) {
			t.Fatalf("ApplyPatch(%s, %s) = %s: invalid JSON", doc, patch, out)
		}
	})
}

// A document with text after its value ("{}]") is refused, not read as its first value.
func TestApplyRefusesTrailingText(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"a":1}]`, `0]`, `{} {}`} {
		if out, err := rawjson.Apply(json.RawMessage(doc), json.RawMessage(`[{"op":"add","path":"","value":1}]`)); err == nil {
			t.Errorf("Apply(%s) = %s, want an error", doc, out)
		}
	}
}
