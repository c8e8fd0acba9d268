package rawjson

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Equal is deep equality of two JSON texts (docs/engine.md#json-equality): literals and strings by
// value, numbers by exact value (their decimal text, normalised: 1, 1.0 and 10e-1 are equal;
// 9007199254740993 and 9007199254740992 are not), arrays element by element, objects by equal key
// sets and equal values whatever the key order (a repeated key counts once, its last value, as a
// decoder reads it). Byte-identical texts are equal without being scanned. Malformed text is equal
// only to identical bytes.
func Equal(a, b []byte) bool {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if bytes.Equal(a, b) {
		return true
	}
	ka, kb := rawKind(a), rawKind(b)
	if isNumberStart(ka) && isNumberStart(kb) {
		na, okA := NormalizeNumber(string(a))
		nb, okB := NormalizeNumber(string(b))
		return okA && okB && na == nb
	}
	if ka != kb {
		return false
	}
	switch ka {
	case '{':
		am, err := objectMembers(a)
		if err != nil {
			return false
		}
		bm, err := objectMembers(b)
		if err != nil {
			return false
		}
		av, bv := lastWins(am), lastWins(bm)
		if len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !Equal(x, y) {
				return false
			}
		}
		return true
	case '[':
		ae, err := arrayElems(a)
		if err != nil {
			return false
		}
		be, err := arrayElems(b)
		if err != nil || len(ae) != len(be) {
			return false
		}
		for i := range ae {
			if !Equal(ae[i], be[i]) {
				return false
			}
		}
		return true
	case '"':
		var sa, sb string
		return json.Unmarshal(a, &sa) == nil && json.Unmarshal(b, &sb) == nil && sa == sb
	}
	return false // distinct literals (true, false, null) or malformed text
}

func lastWins(ms []rawMember) map[string][]byte {
	out := make(map[string][]byte, len(ms))
	for _, m := range ms {
		out[m.key] = m.val
	}
	return out
}

func isNumberStart(c byte) bool { return c == '-' || (c >= '0' && c <= '9') }

// NormalizeNumber returns the canonical text of a JSON number's exact value: an optional "-", the
// significant digits without leading or trailing zeros, "e" and the decimal exponent ("12e0" for
// 12, 120 and 1.2e1 alike; "0" for every zero, signed or not). ok is false when s is not a JSON
// number or its exponent does not fit an int64.
func NormalizeNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, exp, hasExp := s, "", false
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp, hasExp = s[:i], s[i+1:], true
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if !allDigits(intPart) || len(intPart) == 0 || (len(intPart) > 1 && intPart[0] == '0') ||
		(strings.Contains(mant, ".") && (len(frac) == 0 || !allDigits(frac))) {
		return "", false
	}
	var e int64
	if hasExp {
		digits := strings.TrimLeft(exp, "+-")
		if len(digits) == 0 || !allDigits(digits) || len(exp)-len(digits) > 1 {
			return "", false
		}
		var err error
		if e, err = strconv.ParseInt(exp, 10, 64); err != nil {
			return "", false
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return "0", true
	}
	trimmed := strings.TrimRight(digits, "0")
	shift := int64(len(digits)-len(trimmed)) - int64(len(frac))
	if (shift > 0 && e > (1<<62)) || (shift < 0 && e < -(1<<62)) {
		return "", false
	}
	e += shift
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + strconv.FormatInt(e, 10), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
