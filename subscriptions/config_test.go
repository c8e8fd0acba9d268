package subscriptions

import (
	"strings"
	"testing"
)

// TestSubscriptionGlobMatchesWholeSegments: "*" is exactly one segment, "**" zero or more, any
// other segment itself (docs/server.md#configuration).
func TestSubscriptionGlobMatchesWholeSegments(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"events/*", "events/a", true},
		{"events/*", "events/a/b", false},
		{"events/*", "events", false},
		{"events/*", "eventsx/a", false},
		{"events/**", "events", true},
		{"events/**", "events/a/b/c", true},
		{"**", "anything/at/all", true},
		{"**/x", "x", true},
		{"**/x", "a/b/x", true},
		{"**/x", "a/b/xy", false},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/c", false},
		{"a/**/c", "a/c", true},
		{"a/**/c", "a/b/b/c", true},
		{"a/b", "a/b", true},
		{"a/b", "a/bb", false},
		{"a*", "ab", false}, // "*" only as a whole segment
	}
	for _, c := range cases {
		if got := matchGlob(c.pattern, c.path); got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
	// Many "**" against a long path that does not match: linear, not exponential, in them.
	pattern := strings.Repeat("**/", 40) + "x"
	path := strings.TrimSuffix(strings.Repeat("a/", 60), "/")
	if matchGlob(pattern, path) || !matchGlob(pattern, path+"/x") {
		t.Error("many ** segments: wrong answer")
	}
	if p := globPrefix("events/*/x"); p != "/events/" {
		t.Errorf("globPrefix: got %q", p)
	}
}

// FuzzSubscriptionConfig: normalizing any configuration never panics, a normalized one
// normalizes to itself, and a valid glob without wildcards matches exactly its own (valid) path.
func FuzzSubscriptionConfig(f *testing.F) {
	f.Add("webhook", "events/*", "a/b", "https://h.example/x", "", int64(0), "events/a")
	f.Add("pull-wake", "**", "x", "", "wake/pool", int64(1000), "a/b/c")
	f.Add("pull-wake", "a/**/b", "", "", "w", int64(600000), "a/b")
	f.Add("webhook", "", "", "", "", int64(-1), "")
	f.Fuzz(func(t *testing.T, typ, pattern, stream, hook, wake string, ttl int64, path string) {
		c := Config{Type: typ, Pattern: pattern, WebhookURL: hook, WakeStream: wake, LeaseTTLms: ttl}
		if stream != "" {
			c.Streams = []string{stream, stream}
		}
		n, err := Normalize(c)
		if err == nil {
			again, err := Normalize(n)
			if err != nil || configHash(again) != configHash(n) {
				t.Fatalf("normalized %+v does not normalize to itself: %+v %v", n, again, err)
			}
			if len(n.Streams) > 1 {
				t.Fatalf("duplicates kept: %v", n.Streams)
			}
		}
		// Between a pattern and a path the store accepts (no empty segment, no leading slash):
		// an empty segment matches nothing, so "/" does not match "/".
		if pattern != "" && !strings.Contains(pattern, "*") && checkPath(pattern) == nil && checkPath(path) == nil {
			if got := matchGlob(pattern, path); got != (pattern == path) {
				t.Fatalf("literal pattern %q vs %q: got %v", pattern, path, got)
			}
		}
		_ = matchGlob(pattern, path)
	})
}
