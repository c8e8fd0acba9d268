package rawjson_test

import (
	"encoding/json"
	"testing"

	"github.com/foldstream/foldstream/internal/rawjson"
)

func TestEqualComparesNumbersByExactValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{`9007199254740993`, `9007199254740992`, false},
		{`{"id":1234567890123456789}`, `{"id":1234567890123456788}`, false},
		{`1`, `1.0`, true},
		{`1`, `10e-1`, true},
		{`120`, `1.2e2`, true},
		{`0`, `-0.0`, true},
		{`-1`, `1`, false},
		{`1e400`, `10e399`, true},
		{`0.1`, `0.10000000000000001`, false},
		{`{"a":1,"b":[1,2]}`, `{"b":[1.0,2],"a":1}`, true},
		{`{"a":1}`, `{"a":1,"b":null}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`"\u00e9"`, `"é"`, true},
		{`"1"`, `1`, false},
		{`true`, `false`, false},
		{`null`, ` null `, true},
		{`{"a":1,"a":2}`, `{"a":2}`, true},
	} {
		if got := rawjson.Equal([]byte(c.a), []byte(c.b)); got != c.want {
			t.Errorf("Equal(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestNormalizeNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "0.000": "0", "12": "12e0", "120": "12e1", "1.2e1": "12e0",
		"-0.0012": "-12e-4", "1E+3": "1e3", "9007199254740993": "9007199254740993e0",
	} {
		got, ok := rawjson.NormalizeNumber(in)
		if !ok || got != want {
			t.Errorf("NormalizeNumber(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "-", "01", "1.", ".5", "1e", "1e+-2", "0x10", "1e99999999999999999999"} {
		if _, ok := rawjson.NormalizeNumber(bad); ok {
			t.Errorf("NormalizeNumber(%q) accepted", bad)
		}
	}
}

// FuzzEqual: a value equals its own re-encoding (keys sorted, duplicates collapsed, numbers kept as
// text), and equality is symmetric; malformed text never panics.
func FuzzEqual(f *testing.F) {
	f.Add(`{"b":[1,2.50,{"x":null}],"a":"\u00e9","b":true}`, `{"a":"é","b":true}`)
	f.Add(`[9007199254740993, 1e2, -0]`, `[9007199254740992, 100, 0]`)
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, bb := []byte(a), []byte(b)
		if rawjson.Equal(ab, bb) != rawjson.Equal(bb, ab) {
			t.Fatalf("Equal(%s, %s) is not symmetric", a, b)
		}
		v, err := rawjson.DecodeNumbers(ab)
		if err != nil {
			return
		}
		re, err := json.Marshal(v)
		if err != nil {
			return
		}
		if !rawjson.Equal(ab, re) {
			t.Fatalf("%s is not equal to its re-encoding %s", a, re)
		}
	})
}
