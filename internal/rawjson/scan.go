package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
)

// This file holds a small scanner over raw JSON text. The diff uses it to split objects and arrays
// into raw members without decoding them, so unchanged subtrees are skipped by a byte comparison
// instead of being decoded and compared node by node.

// ErrMalformed reports JSON text the scanner cannot split.
var ErrMalformed = errors.New("rawjson: malformed JSON")

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
		return 0, ErrMalformed
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
		return 0, ErrMalformed
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return 0, ErrMalformed
				}
				return j, nil
			}
			j++
		}
		if j == i {
			return 0, ErrMalformed
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
			return 0, ErrMalformed
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
		return nil, ErrMalformed
	}
	var out []rawMember
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, ErrMalformed
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
			return nil, ErrMalformed
		}
		i = skipWS(b, i+1)
		ve, err := valueEnd(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, rawMember{key: key, val: b[i:ve]})
		i = skipWS(b, ve)
		if i >= len(b) {
			return nil, ErrMalformed
		}
		if b[i] == '}' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, ErrMalformed
		}
		i = skipWS(b, i+1)
	}
}

func unquoteKey(q []byte) (string, error) {
	// Without escapes and with valid UTF-8 the key is its bytes; otherwise it is decoded as
	// encoding/json decodes it (invalid UTF-8 becomes U+FFFD), as string values are in Equal.
	if bytes.IndexByte(q, '\\') < 0 && utf8.Valid(q) {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return "", ErrMalformed
	}
	return s, nil
}

// arrayElems splits a raw JSON array into its elements.
func arrayElems(b []byte) ([][]byte, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, ErrMalformed
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
			return nil, ErrMalformed
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, ErrMalformed
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

// escapePointer escapes one JSON-Pointer segment: "~" → "~0", "/" → "~1".
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
