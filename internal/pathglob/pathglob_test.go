package pathglob

import (
	"strings"
	"testing"
)

// The fast paths (no "**", one trailing "**") answer as the general match does, on every pattern
// and path of a small alphabet of segments, empty ones included.
func TestFastPathsAgreeWithTheGeneralMatch(t *testing.T) {
	segs := []string{"a", "b", One, Any}
	var patterns [][]string
	var grow func(p []string)
	grow = func(p []string) {
		if len(p) > 0 {
			patterns = append(patterns, p)
		}
		if len(p) == 4 {
			return
		}
		for _, s := range segs {
			grow(append(append([]string(nil), p...), s))
		}
	}
	grow(nil)
	var paths []string
	var grow2 func(p string, n int)
	grow2 = func(p string, n int) {
		paths = append(paths, p)
		if n == 4 {
			return
		}
		for _, s := range []string{"a", "b", ""} {
			next := s
			if n > 0 {
				next = p + "/" + s
			}
			grow2(next, n+1)
		}
	}
	grow2("", 0)
	for _, p := range patterns {
		g := FromSegments(p...)
		for _, path := range paths {
			if got, want := g.Match(path), matchSegs(p, strings.Split(path, "/")); got != want {
				t.Fatalf("%q vs %q: got %v, the general match says %v", strings.Join(p, "/"), path, got, want)
			}
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	for _, c := range []struct{ name, pattern, path string }{
		{"one", "carts/*", "carts/42"},
		{"trailing-any", "tenants/acme/*/**", "tenants/acme/orders/7"},
		{"inner-any", "a/**/c", "a/b/b/c"},
	} {
		g, err := Parse(c.pattern)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if !g.Match(c.path) {
					b.Fatal("no match")
				}
			}
		})
	}
}
