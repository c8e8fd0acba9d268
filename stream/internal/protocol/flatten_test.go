package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// flattenReference is the two-pass flattening the one-pass scanner replaced: encoding/json's
// Valid, then a split at the commas of depth one, then Compact. The store's split
// (flattenJSON) must agree with it.
func flattenReference(body []byte) ([][]byte, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || !json.Valid(trimmed) {
		return nil, false
	}
	raws := [][]byte{trimmed}
	if trimmed[0] == '[' {
		raws = splitArray(trimmed)
	}
	out := make([][]byte, len(raws))
	for i, r := range raws {
		var b bytes.Buffer
		if err := json.Compact(&b, r); err != nil {
			return nil, false
		}
		out[i] = b.Bytes()
	}
	return out, true
}

// splitArray returns the elements of a valid JSON array (whitespace around them trimmed) in one
// pass: it tracks nesting depth and strings, and cuts at the commas of depth one.
func splitArray(arr []byte) [][]byte {
	var out [][]byte
	depth, start := 0, -1
	inString, escaped := false, false
	for i, c := range arr {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && start < 0 {
				start = i
			}
		case '[', '{':
			depth++
			if depth == 2 && start < 0 {
				start = i
			}
		case ']', '}':
			if depth == 1 { // the closing bracket of the array
				if start >= 0 {
					out = append(out, bytes.TrimSpace(arr[start:i]))
				}
				return out
			}
			depth--
		case ',':
			if depth == 1 {
				out = append(out, bytes.TrimSpace(arr[start:i]))
				start = -1
			}
		case ' ', '\t', '\r', '\n':
		default:
			if depth == 1 && start < 0 {
				start = i
			}
		}
	}
	return out
}

// TestFlattenJSON: the store's split of a JSON body, case by case: whitespace dropped, one level of
// array flattened, an empty array refused unless allowed, malformed bodies refused as bad requests.
func TestFlattenJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in    string
		want  []string
		empty bool
		bad   bool
	}{
		{in: `{"a" :  1}`, want: []string{`{"a":1}`}},
		{in: `[1, 2]`, want: []string{`1`, `2`}},
		{in: `[[1,2],[3,4]]`, want: []string{`[1,2]`, `[3,4]`}},
		{in: `[[[1,2,3]]]`, want: []string{`[[1,2,3]]`}},
		{in: `"s"`, want: []string{`"s"`}},
		{in: `null`, want: []string{`null`}},
		{in: `[]`, bad: true},
		{in: `[]`, empty: true, want: []string{}},
		{in: `{`, bad: true},
		{in: ``, bad: true},
		{in: `[1,]`, bad: true},
	}
	for _, c := range cases {
		got, err := flattenJSON([]byte(c.in), c.empty)
		if c.bad {
			if foldtype.CodeOf(err) != foldtype.CodeBadRequest {
				t.Errorf("flattenJSON(%q): got err %v, want bad request", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("flattenJSON(%q): %v", c.in, err)
			continue
		}
		var gs []string
		for _, g := range got {
			gs = append(gs, string(g))
		}
		if strings.Join(gs, "|") != strings.Join(c.want, "|") {
			t.Errorf("flattenJSON(%q): got %q, want %q", c.in, gs, c.want)
		}
	}
}

// FuzzFlattenJSON checks the one-pass validator and splitter against encoding/json: the same
// bodies are accepted, and they split into the same compact messages.
func FuzzFlattenJSON(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, `[1, 2 ,3]`, `[]`, ` [ {"a" : [1,{"b":"c\"]"}]} ] `, `"x`, `[1,]`, `01`, `-0.5e+3`,
		`"\u00e9\n"`, `[true,false,null]`, `{"a":1}x`, `[[[]]]`, "\"\x01\"", `1.`, `-`, `[1 2]`, `{"a" 1}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantOK := flattenReference(body)
		got, err := flattenJSON(body, true)
		if (err == nil) != wantOK {
			t.Fatalf("%q: accepted %v, encoding/json says %v (%v)", body, err == nil, wantOK, err)
		}
		if err != nil {
			return
		}
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("%q: split into %q, want %q", body, got, want)
		}
	})
}

// BenchmarkFlattenJSON flattens a producer batch of 100 messages of about 200 bytes, one pass
// (the store's split) against the two-pass reference.
func BenchmarkFlattenJSON(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":"dsbench#0000000042","kind":"bench","pad":"` + string(bytes.Repeat([]byte("x"), 140)) + `"}`)
	}
	buf.WriteByte(']')
	body := buf.Bytes()
	b.Run("one-pass", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := flattenJSON(body, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, ok := flattenReference(body); !ok {
				b.Fatal("invalid")
			}
		}
	})
}

// flattenJSON is the store's split of a JSON body (splitJSON, no provenance rules) as the compact
// text of each message.
func flattenJSON(body []byte, allowEmpty bool) ([][]byte, error) {
	msgs, err := splitJSON(body, allowEmpty, nil)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Raw
	}
	return out, nil
}

// FuzzFlattenJSONRoundTrip: JSON-mode bodies either fail with a bad-request error or flatten into
// valid, compact messages that agree with encoding/json's split and flatten back to themselves.
func FuzzFlattenJSONRoundTrip(f *testing.F) {
	for _, s := range []string{`{"a" : 1}`, `[1,2]`, `[[1,2],[3,4]]`, `[]`, `[`, `"x"`, `null`, `[{"type":"t","idempotencyKey":"k"}]`,
		"[1e999]", `"\ud800"`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := flattenJSON(body, false)
		if err != nil {
			if !errors.Is(err, foldtype.ErrBadRequest) && !errors.Is(err, foldtype.ErrTooLarge) {
				t.Fatalf("flattenJSON(%q): got %v, want a bad-request error", body, err)
			}
			return
		}
		for _, m := range msgs {
			if !json.Valid(m) {
				t.Fatalf("flattenJSON(%q) produced invalid message %q", body, m)
			}
		}
		// Differential check against encoding/json's own split.
		var ref []json.RawMessage
		if tb := bytes.TrimSpace(body); len(tb) > 0 && tb[0] == '[' && json.Unmarshal(body, &ref) == nil {
			if len(ref) != len(msgs) {
				t.Fatalf("flattenJSON(%q): %d messages, encoding/json finds %d", body, len(msgs), len(ref))
			}
			for i := range ref {
				var c bytes.Buffer
				_ = json.Compact(&c, ref[i])
				if !bytes.Equal(c.Bytes(), msgs[i]) {
					t.Fatalf("flattenJSON(%q) message %d: got %q, want %q", body, i, msgs[i], c.Bytes())
				}
			}
		}
		again, err := flattenJSON(append(append([]byte("["), bytes.Join(msgs, []byte(","))...), ']'), false)
		if err != nil || len(again) != len(msgs) {
			t.Fatalf("re-flattening %q: got %d messages, err %v; want %d", body, len(again), err, len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(again[i], msgs[i]) {
				t.Fatalf("re-flattening changed message %d: %q vs %q", i, again[i], msgs[i])
			}
		}
	})
}
