package pathglob_test

import (
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/subscriptions"
)

// TestOneGrammarOnBothUses pins the path-glob grammar on its two uses (docs/store.md#path-patterns):
// a subscription pattern ("events/*", stream-root-relative) and a processor pattern ("/events/*",
// an absolute store path) agree on every path, except where the grammar's documented differences
// say otherwise: a processor's "**" may only end the pattern and needs at least one segment.
func TestOneGrammarOnBothUses(t *testing.T) {
	cases := []struct {
		pattern string // subscription form; the processor form is "/" + pattern
		path    string // subscription form; the processor's store path is "/" + path
		sub     bool   // a subscription links it
		proc    bool   // a processor pattern covers it
	}{
		// Literal segments match themselves; wildcards count only as whole segments.
		{"events/a", "events/a", true, true},
		{"events/a", "events/ab", false, false},
		{"a*b/x", "a*b/x", true, true},
		{"a*b/x", "axb/x", false, false},
		// "*" is exactly one non-empty segment.
		{"events/*", "events/a", true, true},
		{"events/*", "events", false, false},
		{"events/*", "events/a/b", false, false},
		{"events/*", "eventsx/a", false, false},
		{"*/orders/*", "eu/orders/7", true, true},
		// A trailing "**" matches one or more segments for both...
		{"events/**", "events/a", true, true},
		{"events/**", "events/a/b/c", true, true},
		{"events/**", "other/a", false, false},
		// ...and the prefix itself only for a subscription (zero segments).
		{"events/**", "events", true, false},
	}
	s := subscriptions.Config{Type: subscriptions.PullWake, WakeStream: "wake"}
	for _, c := range cases {
		s.Pattern = c.pattern
		if _, err := subscriptions.Normalize(s); err != nil {
			t.Fatalf("subscription pattern %q refused: %v", c.pattern, err)
		}
		if got := s.Matches(c.path); got != c.sub {
			t.Errorf("subscription %q vs %q: got %v, want %v", c.pattern, c.path, got, c.sub)
		}
		p, err := host.ParsePattern("/" + c.pattern)
		if err != nil {
			t.Fatalf("processor pattern /%s refused: %v", c.pattern, err)
		}
		if got := p.Match("/" + c.path); got != c.proc {
			t.Errorf("processor /%s vs /%s: got %v, want %v", c.pattern, c.path, got, c.proc)
		}
	}
	// "**" before the last segment: a subscription pattern, never a processor pattern.
	s.Pattern = "a/**/c"
	if _, err := subscriptions.Normalize(s); err != nil || !s.Matches("a/c") || !s.Matches("a/b/b/c") {
		t.Errorf("subscription a/**/c: %v", err)
	}
	if _, err := host.ParsePattern("/a/**/c"); !errors.Is(err, foldtype.ErrBadRequest) {
		t.Errorf("processor /a/**/c: got %v, want BAD_REQUEST", err)
	}
	// Empty segments are refused in both forms.
	for _, bad := range []string{"a//b", "a/", "/a"} {
		s.Pattern = bad
		if _, err := subscriptions.Normalize(s); !errors.Is(err, foldtype.ErrBadRequest) {
			t.Errorf("subscription pattern %q: got %v, want BAD_REQUEST", bad, err)
		}
	}
	for _, bad := range []string{"/a//b", "/a/", "//a"} {
		if _, err := host.ParsePattern(bad); !errors.Is(err, foldtype.ErrBadRequest) {
			t.Errorf("processor pattern %q: got %v, want BAD_REQUEST", bad, err)
		}
	}
}
