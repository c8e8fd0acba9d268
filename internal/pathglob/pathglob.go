// Package pathglob is foldstream's one path-glob grammar, shared by subscription patterns
// (package subscriptions) and processor patterns (host.RegisterPattern and the host's bulk
// ...Matching verbs). See docs/store.md#path-patterns.
//
// A pattern is a path of "/"-separated segments, matched segment by segment against a path split
// the same way:
//
//   - a literal segment matches exactly itself ("a*b" is a literal: wildcards count only as whole
//     segments);
//   - "*" matches exactly one segment;
//   - "**" matches zero or more segments, anywhere in the pattern.
//
// A wildcard never matches an empty segment, and a pattern never has one ([Parse] refuses "//", a
// leading or a trailing "/"). Matching takes O(len(pattern)·len(path)) time however many "**"
// a pattern holds: patterns come from clients, and a backtracking match is exponential in them.
//
// The two uses differ in the forms they accept, not in what a segment means: a processor pattern
// is an absolute store path ("/carts/*") whose "**" must be its last segment and stands for
// "*/**" (one or more segments); a subscription pattern is a stream-root-relative path
// ("events/*") with "**" anywhere. docs/store.md#path-patterns says why.
package pathglob

import (
	"errors"
	"strings"
)

// Wildcard segments.
const (
	// One matches exactly one segment.
	One = "*"
	// Any matches zero or more segments.
	Any = "**"
)

// Glob is a parsed pattern. Its zero value matches nothing but the empty path.
type Glob struct {
	segs []string
	anys int // how many segments are Any
}

func newGlob(segs []string) Glob {
	g := Glob{segs: segs}
	for _, s := range segs {
		if s == Any {
			g.anys++
		}
	}
	return g
}

// Parse parses a pattern of "/"-separated segments without a leading "/". It refuses an empty
// pattern and empty segments (a leading, trailing or doubled "/").
func Parse(pattern string) (Glob, error) {
	if pattern == "" {
		return Glob{}, errors.New("the pattern is empty")
	}
	segs := strings.Split(pattern, "/")
	for _, seg := range segs {
		if seg == "" {
			return Glob{}, errors.New("empty segments are not allowed")
		}
	}
	return newGlob(segs), nil
}

// FromSegments returns the pattern of segs as they are (a processor pattern's trailing "**"
// passed as "*", "**").
func FromSegments(segs ...string) Glob { return newGlob(segs) }

// Match reports whether path (split at "/") matches pattern. It does not check the pattern:
// an empty segment in it matches nothing.
func Match(pattern, path string) bool { return newGlob(strings.Split(pattern, "/")).Match(path) }

// Match reports whether path, split at "/", matches the pattern. The common forms — no "**",
// or one as the last segment — match without allocating.
func (g Glob) Match(path string) bool {
	switch {
	case g.anys == 0:
		rest, more, ok := matchFixed(g.segs, path)
		return ok && rest == "" && !more
	case g.anys == 1 && g.segs[len(g.segs)-1] == Any:
		rest, more, ok := matchFixed(g.segs[:len(g.segs)-1], path)
		if !ok {
			return false
		}
		if !more {
			return rest == "" // zero segments left
		}
		return rest != "" && !strings.Contains("/"+rest+"/", "//") // one or more non-empty ones
	}
	return matchSegs(g.segs, strings.Split(path, "/"))
}

// matchFixed matches the segments of pat, none of them Any, against the first segments of
// path. It returns what follows them: rest, after the "/" that ends them when more is true;
// rest is "" and more false when they took the whole path. A path of fewer segments fails.
func matchFixed(pat []string, path string) (rest string, more, ok bool) {
	rest, more = path, true
	for _, p := range pat {
		if !more {
			return "", false, false // the path ended first
		}
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		if seg == "" || (p != One && p != seg) {
			return "", false, false
		}
	}
	return rest, more, true
}

// IsLiteral reports whether the pattern has no wildcard segment.
func (g Glob) IsLiteral() bool {
	for _, s := range g.segs {
		if s == One || s == Any {
			return false
		}
	}
	return true
}

// LiteralPrefix returns the segments before the first wildcard, each followed by "/" ("events/"
// for "events/*/x"; "" when the pattern starts with a wildcard): every path the pattern matches
// past them starts with it.
func (g Glob) LiteralPrefix() string {
	var b strings.Builder
	for _, seg := range g.segs {
		if seg == One || seg == Any {
			break
		}
		b.WriteString(seg)
		b.WriteString("/")
	}
	return b.String()
}

// matchSegs matches segment by segment in O(len(pat)·len(segs)) time and memory.
func matchSegs(pat, segs []string) bool {
	// cur[j] reports whether the pattern's segments so far match segs[:j].
	cur := make([]bool, len(segs)+1)
	next := make([]bool, len(segs)+1)
	cur[0] = true
	for _, p := range pat {
		if p == Any {
			// Zero or more non-empty segments: segs[:j] is reached from any earlier reachable i
			// whose segments i..j-1 are all non-empty.
			seen := false
			for j := range cur {
				if j > 0 && segs[j-1] == "" {
					seen = false
				}
				seen = seen || cur[j]
				next[j] = seen
			}
		} else {
			next[0] = false
			for j := 1; j <= len(segs); j++ {
				s := segs[j-1]
				next[j] = cur[j-1] && s != "" && (p == One || p == s)
			}
		}
		cur, next = next, cur
	}
	return cur[len(segs)]
}
