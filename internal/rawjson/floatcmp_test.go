package rawjson

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// parsesTo is the definition floatTokenIs shortcuts: the token parses to exactly f, sign included.
func parsesTo(tok []byte, f float64, k kind) bool {
	bits := 64
	if k == kFloat32 {
		bits = 32
	}
	old, err := strconv.ParseFloat(string(tok), bits)
	return err == nil && old == f && math.Signbit(old) == math.Signbit(f)
}

func checkFloatToken(t *testing.T, f0, f float64, k kind) (decided bool) {
	t.Helper()
	tok, ok := appendFloat(nil, f0, k)
	if !ok {
		return false
	}
	is, decided := floatTokenIs(tok, f, k)
	if decided && is != parsesTo(tok, f, k) {
		t.Fatalf("floatTokenIs(%s, %v (%b), kind %d) = %v, parsing says %v", tok, f, math.Float64bits(f), k, is, !is)
	}
	return decided
}

// The shortcut agrees with parsing for the value a token was written from, its neighbours one ulp
// away, and unrelated values — for float64 and float32, across magnitudes.
func TestFloatTokenIsAgreesWithParsing(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	decided, total := 0, 0
	for range 200000 {
		var f0 float64
		switch r.IntN(5) {
		case 0:
			f0 = float64(r.IntN(100000)) / 7
		case 1:
			f0 = math.Float64frombits(r.Uint64())
		case 2:
			f0 = float64(r.IntN(1000000)) / 100 // prices
		case 3:
			f0 = r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
		case 4:
			f0 = float64(r.Int64N(1 << 60))
		}
		if r.IntN(2) == 0 {
			f0 = -f0
		}
		k := kFloat64
		if r.IntN(4) == 0 {
			k, f0 = kFloat32, float64(float32(f0))
		}
		cands := []float64{f0, math.Nextafter(f0, math.Inf(1)), math.Nextafter(f0, math.Inf(-1)), -f0, f0 * 1.5, 0}
		if k == kFloat32 {
			f32 := float32(f0)
			cands = append(cands, float64(math.Nextafter32(f32, float32(math.Inf(1)))), float64(math.Nextafter32(f32, float32(math.Inf(-1)))))
		}
		for _, f := range cands {
			total++
			if checkFloatToken(t, f0, f, k) {
				decided++
			}
		}
	}
	if decided < total/2 {
		t.Fatalf("the shortcut decided only %d of %d comparisons", decided, total)
	}
}

// FuzzFloatTokenIs checks the shortcut against parsing for any two floats.
func FuzzFloatTokenIs(f *testing.F) {
	f.Add(uint64(0x4061db6db6db6db7), uint64(0x4061db6db6db6db7), false)
	f.Add(math.Float64bits(0.1), math.Float64bits(0.1)+1, true)
	f.Fuzz(func(t *testing.T, a, b uint64, f32 bool) {
		fa, fb := math.Float64frombits(a), math.Float64frombits(b)
		k := kFloat64
		if f32 {
			k, fa, fb = kFloat32, float64(float32(fa)), float64(float32(fb))
		}
		checkFloatToken(t, fa, fa, k)
		checkFloatToken(t, fa, fb, k)
	})
}
