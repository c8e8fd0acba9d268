package rawjson

import (
	"math"
	"math/bits"
)

// This file decides whether a float's JSON token holds a given value without parsing it. The walk
// compares every float of a value with the token it had; strconv.ParseFloat was a third of that
// walk. A token m·10^-q (m the digits, q the places after the point less the exponent) parses to f
// exactly when f is the float nearest to it, that is when |m/10^q − f| is below half of f's ulp;
// with f = M·2^-S that is |m·2^(S+1) − 2M·10^q| < 10^q, which fits 128-bit integers for the
// values states hold. Anything else (huge or tiny values, more than 19 digits, ties, a power of two,
// where the ulp below is smaller) is left undecided, and the caller parses.

// pow10u64 holds 10^0 … 10^19.
var pow10u64 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// floatTokenIs reports whether tok, a JSON number written by encoding/json for a float of kind k,
// parses to f; decided is false when the shortcut does not apply.
func floatTokenIs(tok []byte, f float64, k kind) (is, decided bool) {
	i := 0
	neg := false
	if i < len(tok) && tok[i] == '-' {
		neg, i = true, i+1
	}
	var m uint64
	digits, q := 0, 0
	point := false
	for ; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= '0' && c <= '9':
			if m == 0 && c == '0' { // leading zeros carry no digit
				if point {
					q++
				}
				continue
			}
			if digits == 19 {
				return false, false
			}
			m = m*10 + uint64(c-'0')
			digits++
			if point {
				q++
			}
		case c == '.' && !point:
			point = true
		case c == 'e' || c == 'E':
			x, ok := smallExponent(tok[i+1:])
			if !ok {
				return false, false
			}
			q -= x
			i = len(tok)
		default:
			return false, false
		}
	}
	if m == 0 || f == 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return false, false // zeros and signs: the caller parses
	}
	if neg != (f < 0) {
		return false, true
	}
	if q < 0 || q >= len(pow10u64) {
		return false, false
	}
	var mant uint64
	var exp int // f = mant · 2^exp
	if k == kFloat32 {
		if float64(float32(f)) != f {
			return false, true // the token parses to a float32; f is none
		}
		b := math.Float32bits(float32(math.Abs(f)))
		be := int(b>>23) & 0xff
		if be == 0 || b&(1<<23-1) == 0 {
			return false, false // subnormal, or a power of two
		}
		mant, exp = uint64(b&(1<<23-1)|1<<23), be-150
	} else {
		b := math.Float64bits(math.Abs(f))
		be := int(b>>52) & 0x7ff
		if be == 0 || b&(1<<52-1) == 0 {
			return false, false
		}
		mant, exp = b&(1<<52-1)|1<<52, be-1075
	}
	s := -exp
	if s <= 0 || bits.Len64(m)+s+1 > 127 {
		return false, false
	}
	// a = m·2^(s+1), b = 2·mant·10^q, both below 2^128.
	var aHi, aLo uint64
	if sh := uint(s + 1); sh >= 64 {
		aHi, aLo = m<<(sh-64), 0
	} else {
		aHi, aLo = m>>(64-sh), m<<sh
	}
	bHi, bLo := bits.Mul64(2*mant, pow10u64[q])
	if bits.Len64(2*mant)+bits.Len64(pow10u64[q]) > 127 {
		return false, false
	}
	// d = |a − b|
	var dHi, dLo uint64
	if aHi > bHi || aHi == bHi && aLo >= bLo {
		var borrow uint64
		dLo, borrow = bits.Sub64(aLo, bLo, 0)
		dHi, _ = bits.Sub64(aHi, bHi, borrow)
	} else {
		var borrow uint64
		dLo, borrow = bits.Sub64(bLo, aLo, 0)
		dHi, _ = bits.Sub64(bHi, aHi, borrow)
	}
	half := pow10u64[q]
	switch {
	case dHi > 0 || dLo > half:
		return false, true
	case dLo == half:
		return false, false // a tie: even or odd decides
	}
	return true, true
}

// smallExponent parses an exponent's optional sign and up to three digits.
func smallExponent(b []byte) (int, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, b = b[0] == '-', b[1:]
	}
	if len(b) == 0 || len(b) > 3 {
		return 0, false
	}
	x := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		x = x*10 + int(c-'0')
	}
	if neg {
		x = -x
	}
	return x, true
}
