// Package rawjson works on JSON text without decoding more of it than needed: a small scanner, exact
// equality (numbers by value, not through float64), exact-key decoding into Go values, and the
// RFC 6902 diff and apply of live-state patches. It is the engine's internal library; the root
// package exposes what users need (foldstream.ApplyPatch, foldstream.PatchOp).
package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// IsAbsent reports whether raw is absent: empty or the literal null.
func IsAbsent(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// Marshal is json.Marshal without HTML escaping, so the text is what JavaScript's JSON.stringify
// writes: "<", ">" and "&" stay one character each. (encoding/json still escapes U+2028 and U+2029
// unconditionally.)
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Quote renders s as a JSON string, without HTML escaping.
func Quote(s string) string {
	b, err := Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// DecodeNumbers decodes one JSON value with numbers as json.Number (their text kept), and refuses
// trailing data.
func DecodeNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// dec.More would miss a stray closing bracket ("0]"): check the rest of the text itself.
	if rest := bytes.TrimSpace(raw[dec.InputOffset():]); len(rest) > 0 {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}
