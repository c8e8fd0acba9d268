package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// trickyArray is a JSON array of n elements whose strings hold commas, brackets, braces, escaped
// quotes and backslashes, with nested arrays and objects and scalars between them.
func trickyArray(n int) ([]byte, []json.RawMessage) {
	var elems []json.RawMessage
	for i := range n {
		var e string
		switch i % 4 {
		case 0:
			e = fmt.Sprintf(`{"i":%d,"s":"a,b],[c}{\"d\\\\","n":[1,[2,{"x":"]"}]]}`, i)
		case 1:
			e = fmt.Sprintf(`"str, ] %d \" , ["`, i)
		case 2:
			e = fmt.Sprintf("%d", i)
		default:
			e = fmt.Sprintf(`[ {"pad": %q} , null, true ]`, strings.Repeat("p", 300))
		}
		elems = append(elems, json.RawMessage(e))
	}
	var b bytes.Buffer
	b.WriteString(" \n[")
	for i, e := range elems {
		if i > 0 {
			b.WriteString(" ,\n ")
		}
		b.Write(e)
	}
	b.WriteString("]\n")
	return b.Bytes(), elems
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	return b.String()
}

// A response larger than a part is handed on in parts of whole elements, each a valid JSON array
// of about partBytes, which together hold every element in order — whatever the read sizes.
func TestSplitBodyCutsALargeArrayBetweenElementsOnly(t *testing.T) {
	t.Parallel()
	body, elems := trickyArray(40_000) // ~4.5 MB
	for name, r := range map[string]io.Reader{
		"blocks":   bytes.NewReader(body),
		"halves":   iotest.HalfReader(bytes.NewReader(body)),
		"one byte": iotest.OneByteReader(bytes.NewReader(body[:200_000])),
	} {
		t.Run(name, func(t *testing.T) {
			want := elems
			if name == "one byte" {
				// A prefix of the body is no array: cut it at an element boundary and close it.
				var n int
				want, n = prefixElems(body[:200_000], elems)
				r = io.MultiReader(iotest.OneByteReader(bytes.NewReader(body[:n])), strings.NewReader("]"))
			}
			var parts [][]byte
			last, err := splitBody(r, true, func(p []byte) bool { parts = append(parts, p); return true })
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, last)
			if name != "one byte" && len(parts) < 4 {
				t.Fatalf("%d parts for %d bytes, want one per ~%d", len(parts), len(body), partBytes)
			}
			var got []json.RawMessage
			for i, p := range parts {
				if len(p) > partBytes+readBlock+1024 {
					t.Fatalf("part %d is %d bytes, want at most about %d", i, len(p), partBytes)
				}
				var msgs []json.RawMessage
				if err := json.Unmarshal(p, &msgs); err != nil {
					t.Fatalf("part %d is not a JSON array: %v", i, err)
				}
				got = append(got, msgs...)
			}
			if len(got) != len(want) {
				t.Fatalf("%d elements, want %d", len(got), len(want))
			}
			for i := range want {
				if compact(t, got[i]) != compact(t, want[i]) {
					t.Fatalf("element %d: got %s, want %s", i, got[i], want[i])
				}
			}
		})
	}
}

// prefixElems returns the elements wholly inside prefix and the length of prefix up to the end of
// the last of them.
func prefixElems(prefix []byte, elems []json.RawMessage) ([]json.RawMessage, int) {
	pos := bytes.IndexByte(prefix, '[') + 1
	var out []json.RawMessage
	for i, e := range elems {
		sep := 0
		if i > 0 {
			sep = len(" ,\n ")
		}
		if pos+sep+len(e) > len(prefix) {
			return out, pos
		}
		pos += sep + len(e)
		out = append(out, e)
	}
	return out, pos
}

// A body that fits in one part comes back exactly as received, an empty one empty.
func TestSplitBodyReturnsASmallBodyAsReceived(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "[]", " [ 1 , {\"a\":[2]} ]\n"} {
		got, err := splitBody(strings.NewReader(body), true, func([]byte) bool { t.Fatal("a part of a small body"); return false })
		if err != nil || string(got) != body {
			t.Fatalf("splitBody(%q) = %q, %v", body, got, err)
		}
	}
}

// What is not one JSON array is refused, even after parts of it were handed on.
func TestSplitBodyRefusesWhatIsNotOneArray(t *testing.T) {
	t.Parallel()
	big, _ := trickyArray(20_000)
	for name, body := range map[string][]byte{
		"object":         []byte(`{"a":1}`),
		"unclosed":       []byte(`[1,2`),
		"trailing":       []byte(`[1] [2]`),
		"big, unclosed":  big[:len(big)-2],
		"big, trailing":  append(append([]byte{}, big...), 'x'),
		"scalar":         []byte(`7`),
		"garbage before": []byte(`x[1]`),
	} {
		_, err := splitBody(bytes.NewReader(body), true, func([]byte) bool { return true })
		if !errors.Is(err, errNotArray) {
			t.Errorf("%s: got %v, want errNotArray", name, err)
		}
	}
}

// A byte stream's response is handed on in parts of about partBytes, all bytes in order.
func TestSplitBodyCutsBytesIntoParts(t *testing.T) {
	t.Parallel()
	body := make([]byte, 3*partBytes+12345)
	for i := range body {
		body[i] = byte(i * 7)
	}
	var got []byte
	parts := 0
	last, err := splitBody(iotest.HalfReader(bytes.NewReader(body)), false, func(p []byte) bool {
		if len(p) > partBytes+readBlock {
			t.Fatalf("part of %d bytes", len(p))
		}
		got = append(got, p...)
		parts++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, last...)
	if !bytes.Equal(got, body) || parts < 3 {
		t.Fatalf("%d parts, %d bytes (equal %v), want ≥ 3 parts and the body", parts, len(got), bytes.Equal(got, body))
	}
}
