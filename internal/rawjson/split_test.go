package rawjson

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// splitNames are the names the differential tests find: the event fields, and "source" in any
// case.
var splitKeys = NewKeys("source", "type", "idempotencyKey", "payload", "source", "t\u00e9")

// refMember is a member as encoding/json reads it: the decoded key and the compact raw value.
type refMember struct {
	key string
	val []byte
}

// refSplit is Split done with encoding/json: Valid, then the array's elements and each object's
// members through a Decoder, compacted with Compact.
func refSplit(t *testing.T, body []byte) (msgs [][]byte, members [][]refMember, ok bool) {
	t.Helper()
	if !json.Valid(body) {
		return nil, nil, false
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	raws := []json.RawMessage{json.RawMessage(body)}
	if trimmed[0] == '[' {
		raws = nil
		if err := json.Unmarshal(body, &raws); err != nil {
			t.Fatalf("%q: Valid but Unmarshal fails: %v", body, err)
		}
	}
	for _, r := range raws {
		var c bytes.Buffer
		if err := json.Compact(&c, r); err != nil {
			t.Fatalf("%q: Compact: %v", r, err)
		}
		msgs = append(msgs, c.Bytes())
		members = append(members, refMembers(t, c.Bytes()))
	}
	return msgs, members, true
}

// refMembers returns the top-level members of a compact object (nil for any other value).
func refMembers(t *testing.T, obj []byte) []refMember {
	t.Helper()
	if obj[0] != '{' {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	out := []refMember{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, refMember{k.(string), v})
	}
	return out
}

// checkMessage compares what Split found in m with the members encoding/json reads.
func checkMessage(t *testing.T, m *Message, ref []refMember) {
	t.Helper()
	if ref == nil {
		return
	}
	for n, name := range splitKeys.names {
		var want Member
		for _, r := range ref {
			if r.key == name {
				want.Value = r.val
				want.Kinds |= kindOf(r.val[0])
			}
		}
		got := m.Member(n)
		if !bytes.Equal(got.Value, want.Value) || got.Kinds != want.Kinds {
			t.Fatalf("%s: member %q found as %q (kinds %b), encoding/json reads %q (kinds %b)", m.Raw, name, got.Value, got.Kinds, want.Value, want.Kinds)
		}
	}
	var wantFolded []string
	for _, r := range ref {
		if strings.EqualFold(r.key, "source") {
			wantFolded = append(wantFolded, string(r.val))
		}
	}
	var gotFolded []string
	for _, sp := range m.Folded() {
		member := m.Raw[sp.Start:sp.End]
		ref := refMembers(t, append(append([]byte("{"), member...), '}'))
		if len(ref) != 1 {
			t.Fatalf("%s: folded span %q is not one member", m.Raw, member)
		}
		gotFolded = append(gotFolded, string(ref[0].val))
	}
	if !slices.Equal(gotFolded, wantFolded) {
		t.Fatalf("%s: folded members %q, want %q", m.Raw, gotFolded, wantFolded)
	}
}

// FuzzSplit checks the one scanner against encoding/json: it accepts the same bodies, splits them
// into the same compact messages, finds the same members (the last occurrence of an exact name,
// every occurrence of a name in any case), and an edit that drops the folded members and sets one
// leaves an object whose members are what encoding/json reads of it.
func FuzzSplit(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, `[1, 2 ,3]`, `[]`, ` [ {"a" : [1,{"b":"c\"]"}]} ] `, `"x`, `[1,]`, `01`, `-0.5e+3`,
		`"\u00e9\n"`, `[true,false,null]`, `{"a":1}x`, `[[[]]]`, "\"\x01\"", `1.`, `-`, `[1 2]`, `{"a" 1}`,
		`{"type":"t","source":{"platform":true},"SOURCE":1,"ſource":2,"sourc\u0065":3,"payload":{"source":4}}`,
		`[{"source":1,"source":2},{"source":1,"source":2,"a":3},{"a":1,"Source":[1, 2],"b":2}]`,
		`{ "type" : "t" , "t\u0079pe" : 5 , "idempotencyKey" : "k" }`, `{"t\u00e9":1,"té":2}`, `{"source":1}`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		wantMsgs, wantMembers, wantOK := refSplit(t, body)
		msgs, isArray, count, err := Split(body, splitKeys, 0)
		if (err == nil) != wantOK {
			t.Fatalf("%q: accepted %v, encoding/json says %v (%v)", body, err == nil, wantOK, err)
		}
		if err != nil {
			return
		}
		if isArray != (bytes.TrimLeft(body, " \t\r\n")[0] == '[') || count != len(msgs) {
			t.Fatalf("%q: isArray %v, count %d of %d messages", body, isArray, count, len(msgs))
		}
		raws := make([][]byte, len(msgs))
		for i := range msgs {
			raws[i] = msgs[i].Raw
		}
		if !slices.EqualFunc(raws, wantMsgs, bytes.Equal) {
			t.Fatalf("%q: split into %q, want %q", body, raws, wantMsgs)
		}
		for i := range msgs {
			m := &msgs[i]
			checkMessage(t, m, wantMembers[i])
			if m.Raw[0] != '{' {
				continue
			}
			for _, value := range [][]byte{nil, []byte(`{"principal":{"actor":"a"}}`)} {
				edited := m.Edit(m.Folded(), 3, value)
				again, _, _, err := Split(edited.Raw, splitKeys, 0)
				if err != nil || len(again) != 1 {
					t.Fatalf("%s edited to invalid %s", m.Raw, edited.Raw)
				}
				ref := refMembers(t, edited.Raw)
				var want []refMember
				for _, r := range wantMembers[i] {
					if !strings.EqualFold(r.key, "source") {
						want = append(want, r)
					}
				}
				if value != nil {
					want = append(want, refMember{"source", value})
				}
				if !slices.EqualFunc(ref, want, func(a, b refMember) bool { return a.key == b.key && bytes.Equal(a.val, b.val) }) {
					t.Fatalf("%s edited to %s, want the members %q", m.Raw, edited.Raw, want)
				}
				checkMessage(t, &edited, ref)
			}
		}
	})
}

// Split refuses a body over its limit of messages, after validating all of it, without
// keeping the messages.
func TestSplitCountsMessagesOverItsLimit(t *testing.T) {
	msgs, isArray, count, err := Split([]byte(`[1,2,3]`), nil, 2)
	if err != ErrTooMany || msgs != nil || !isArray || count != 3 {
		t.Fatalf("over the limit: %v %v %d %v", msgs, isArray, count, err)
	}
	if _, _, _, err := Split([]byte(`[1,2,3,]`), nil, 2); err != ErrMalformed {
		t.Fatalf("malformed over the limit: %v", err)
	}
	if msgs, _, _, err := Split([]byte(`[1,2]`), nil, 2); err != nil || len(msgs) != 2 {
		t.Fatalf("at the limit: %v %v", msgs, err)
	}
}

// FuzzUnquote decodes string tokens as encoding/json does, invalid UTF-8 and lone surrogates
// included.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00\ud800"`, "\"\xff\xfe\"", `"\"\\\/\b\f\n\r\t"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		var want string
		if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' || json.Unmarshal(q, &want) != nil {
			return
		}
		got, ok := Unquote(q)
		if !ok || got != want {
			t.Fatalf("Unquote(%q) = %q, %v; encoding/json decodes %q", q, got, ok, want)
		}
	})
}

// CutArray keeps the first n elements of an array, whatever they hold.
func TestCutArrayKeepsTheFirstElements(t *testing.T) {
	body := []byte(`[{"a":"x,]}"},[1,[2]],"\"",3,{"b":{}}]`)
	for n, want := range []string{`[]`, `[{"a":"x,]}"}]`, `[{"a":"x,]}"},[1,[2]]]`, `[{"a":"x,]}"},[1,[2]],"\""]`,
		`[{"a":"x,]}"},[1,[2]],"\"",3]`, string(body)} {
		got, err := CutArray(body, n)
		if err != nil || string(got) != want {
			t.Errorf("CutArray(%d) = %s, %v; want %s", n, got, err, want)
		}
	}
	if _, err := CutArray(body, 6); err == nil {
		t.Error("CutArray(6) of 5 elements: no error")
	}
}

// BenchmarkSplitProducerBatch splits a dsbench producer batch (a compact array of 100 messages
// of about 200 bytes) with the store's member names: the server's scan of one producer POST.
func BenchmarkSplitProducerBatch(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":"dsbench#0000000042","kind":"bench","pad":"` + strings.Repeat("x", 140) + `"}`)
	}
	buf.WriteByte(']')
	body := buf.Bytes()
	keys := NewKeys("source", "type", "idempotencyKey", "payload", "metadata", "source", "createdAt", "ephemeral")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		msgs, _, _, err := Split(body, keys, 100000)
		if err != nil || len(msgs) != 100 {
			b.Fatal(err, len(msgs))
		}
	}
}

// Replace swaps a member's value where it stands: the text is what a fresh scan of the edited
// object finds, member for member, and a member of another kind is refused.
func TestReplaceSwapsAMembersValueInPlace(t *testing.T) {
	keys := NewKeys("source", "type", "payload", "metadata", "source")
	for _, tc := range []struct{ in, want string }{
		{`{"type":"a","metadata":{"x":1},"payload":{"n":2},"Source":"s"}`, `{"type":"a","metadata":{"t":"p","x":1},"payload":{"n":2},"Source":"s"}`},
		{`{"metadata":{},"type":"a"}`, `{"metadata":{"t":"p","x":1},"type":"a"}`},
		{`{"type":"a"}`, `{"type":"a","metadata":{"t":"p"}}`},
	} {
		m, err := ScanValue([]byte(tc.in), keys)
		if err != nil {
			t.Fatal(err)
		}
		value := []byte(`{"t":"p","x":1}`)
		if !strings.Contains(tc.in, "metadata") {
			value = []byte(`{"t":"p"}`)
		}
		got, ok := m.Replace(2, value) // metadata: the names after the fold name count from 0
		if !ok || string(got.Raw) != tc.want {
			t.Errorf("Replace in %s: %s %v, want %s", tc.in, got.Raw, ok, tc.want)
			continue
		}
		fresh, err := ScanValue(got.Raw, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if a, b := got.Member(i), fresh.Member(i); !bytes.Equal(a.Value, b.Value) || a.Kinds != b.Kinds {
				t.Errorf("%s: member %d is %s, a fresh scan finds %s", got.Raw, i, a.Value, b.Value)
			}
		}
		if !slices.Equal(got.Folded(), fresh.Folded()) {
			t.Errorf("%s: folded %v, a fresh scan finds %v", got.Raw, got.Folded(), fresh.Folded())
		}
	}
	m, _ := ScanValue([]byte(`{"metadata":"s"}`), keys)
	if got, ok := m.Replace(2, []byte(`{}`)); ok || string(got.Raw) != `{"metadata":"s"}` {
		t.Errorf("Replace of a string by an object: %s %v, want it refused", got.Raw, ok)
	}
}
