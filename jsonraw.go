package foldstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// This file holds a small scanner over raw JSON text. The live-state diff uses it to split
// objects and arrays into raw members without decoding them, so unchanged subtrees are skipped by
// a byte comparison instead of being decoded and compared node by node.

var errBadJSON = errors.New("foldstream: malformed JSON")

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd returns the index just past the JSON value starting at b[i] (no leading space).
func valueEnd(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errBadJSON
	}
	switch c := b[i]; {
	case c == '"':
		return stringEnd(b, i)
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := stringEnd(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errBadJSON
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return 0, errBadJSON
				}
				return j, nil
			}
			j++
		}
		if j == i {
			return 0, errBadJSON
		}
		return j, nil
	}
}

// stringEnd returns the index just past the string starting at b[i] == '"'. It jumps between
// quotes with bytes.IndexByte and counts the backslashes before each to tell an escaped quote.
func stringEnd(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errBadJSON
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

type rawMember struct {
	key string
	val []byte
}

// objectMembers splits a raw JSON object into its members in text order.
func objectMembers(b []byte) ([]rawMember, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errBadJSON
	}
	var out []rawMember
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errBadJSON
		}
		ke, err := stringEnd(b, i)
		if err != nil {
			return nil, err
		}
		key, err := unquoteKey(b[i:ke])
		if err != nil {
			return nil, err
		}
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return nil, errBadJSON
		}
		i = skipWS(b, i+1)
		ve, err := valueEnd(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, rawMember{key: key, val: b[i:ve]})
		i = skipWS(b, ve)
		if i >= len(b) {
			return nil, errBadJSON
		}
		if b[i] == '}' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, errBadJSON
		}
		i = skipWS(b, i+1)
	}
}

func unquoteKey(q []byte) (string, error) {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return "", errBadJSON
	}
	return s, nil
}

// arrayElems splits a raw JSON array into its elements.
func arrayElems(b []byte) ([][]byte, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errBadJSON
	}
	var out [][]byte
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return out, nil
	}
	for {
		ve, err := valueEnd(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, b[i:ve])
		i = skipWS(b, ve)
		if i >= len(b) {
			return nil, errBadJSON
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, errBadJSON
		}
		i = skipWS(b, i+1)
	}
}

func rawKind(b []byte) byte {
	i := skipWS(b, 0)
	if i >= len(b) {
		return 0
	}
	return b[i]
}

// rawEqual is deep JSON equality of two raw values (spec §12.3 jsonEqual), byte-equal first.
func rawEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var av, bv any
	if json.Unmarshal(a, &av) != nil || json.Unmarshal(b, &bv) != nil {
		return false
	}
	return JSONEqual(av, bv)
}

// escapePointer escapes one JSON-Pointer segment: "~" → "~0", "/" → "~1".
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// PatchOp is one RFC 6902 operation of a live-state patch: add, replace or remove.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// DiffJSON computes the spec's patch (§12.3) from JSON text a to JSON text b; an empty result
// means the values are deep-equal. Objects: removes for vanished keys (old order), then adds for
// new keys and a recursive diff for shared keys (new order); arrays: "/-" adds when b extends a,
// tail removes (highest index first) when b is a prefix of a, else one replace; anything else one
// replace. Subtrees whose text is byte-identical are skipped without being decoded, so a small
// change in a large document costs a scan, not a decode. Both sides must be valid JSON as
// produced by encoding/json (no duplicate keys).
func DiffJSON(a, b []byte) ([]PatchOp, error) {
	var ops []PatchOp
	if err := diffRaw("", a, b, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func diffRaw(path string, a, b []byte, ops *[]PatchOp) error {
	if bytes.Equal(a, b) {
		return nil
	}
	ka, kb := rawKind(a), rawKind(b)
	switch {
	case ka == '{' && kb == '{':
		am, err := objectMembers(a)
		if err != nil {
			return err
		}
		bm, err := objectMembers(b)
		if err != nil {
			return err
		}
		old := make(map[string][]byte, len(am))
		for _, m := range am {
			old[m.key] = m.val
		}
		nw := make(map[string]struct{}, len(bm))
		for _, m := range bm {
			nw[m.key] = struct{}{}
		}
		for _, m := range am {
			if _, ok := nw[m.key]; !ok {
				*ops = append(*ops, PatchOp{Op: "remove", Path: path + "/" + escapePointer(m.key)})
			}
		}
		for _, m := range bm {
			p := path + "/" + escapePointer(m.key)
			if ov, ok := old[m.key]; ok {
				if err := diffRaw(p, ov, m.val, ops); err != nil {
					return err
				}
			} else {
				*ops = append(*ops, PatchOp{Op: "add", Path: p, Value: m.val})
			}
		}
		return nil
	case ka == '[' && kb == '[':
		ae, err := arrayElems(a)
		if err != nil {
			return err
		}
		be, err := arrayElems(b)
		if err != nil {
			return err
		}
		p := 0
		for p < len(ae) && p < len(be) && rawEqual(ae[p], be[p]) {
			p++
		}
		switch {
		case p == len(ae) && p == len(be):
		case p == len(ae):
			for _, v := range be[p:] {
				*ops = append(*ops, PatchOp{Op: "add", Path: path + "/-", Value: v})
			}
		case p == len(be):
			for i := len(ae) - 1; i >= p; i-- {
				*ops = append(*ops, PatchOp{Op: "remove", Path: path + "/" + strconv.Itoa(i)})
			}
		default:
			*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: b})
		}
		return nil
	default:
		if ka == 0 || kb == 0 {
			return errBadJSON
		}
		if ka == kb && rawEqual(a, b) {
			return nil
		}
		if (ka == '-' || (ka >= '0' && ka <= '9')) && (kb == '-' || (kb >= '0' && kb <= '9')) && rawEqual(a, b) {
			return nil
		}
		*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: b})
		return nil
	}
}
