package host

import (
	"slices"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/pathglob"
)

// Pattern is a stream path pattern that [RegisterPattern] runs a processor on (see
// docs/store.md#path-patterns). It is written in foldstream's one path-glob grammar (the one
// subscription patterns use too), in the processor form: an absolute store path of "/"-separated
// segments,
//
//   - a literal segment matches itself: "/carts" matches only "/carts";
//   - "*" as a whole segment matches exactly one segment: "/carts/*" matches "/carts/42" but not
//     "/carts" or "/carts/42/items";
//   - "**" as the last segment matches one or more segments below the prefix before it (it stands
//     for "*/**" in the grammar): "/tenants/acme/**" matches "/tenants/acme/orders" and
//     "/tenants/acme/orders/7", not "/tenants/acme" itself.
//
// "*" and "**" are wildcards only as whole segments ("/a*b" is a literal segment); "**" is allowed
// only last; empty segments ("//", a trailing "/") are refused.
type Pattern struct {
	text  string
	segs  []string      // the segments before a trailing "**"
	deep  bool          // ends with "**"
	exact bool          // no wildcard at all
	glob  pathglob.Glob // the pattern in the grammar, for Match
}

// ParsePattern parses a path pattern. It fails with code BAD_REQUEST on a malformed pattern.
func ParsePattern(s string) (Pattern, error) {
	bad := func(why string) (Pattern, error) {
		return Pattern{}, foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"pattern": s},
			"host: pattern %q: %s", s, why)
	}
	if !strings.HasPrefix(s, "/") {
		return bad("it must start with /")
	}
	g, err := pathglob.Parse(s[1:])
	if err != nil {
		return bad(err.Error())
	}
	segs := strings.Split(s[1:], "/")
	p := Pattern{text: s, exact: g.IsLiteral(), glob: g}
	for i, seg := range segs {
		if seg == pathglob.Any {
			if i != len(segs)-1 {
				return bad("** is allowed only as the last segment")
			}
			p.deep = true
			segs = segs[:i]
			// One or more segments: "*" then the grammar's "**" (zero or more).
			p.glob = pathglob.FromSegments(append(slices.Clone(segs), pathglob.One, pathglob.Any)...)
		}
	}
	p.segs = segs
	return p, nil
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.text }

// IsExact reports whether the pattern has no wildcard (it matches one path, itself).
func (p Pattern) IsExact() bool { return p.exact }

// Match reports whether the stream path matches the pattern.
func (p Pattern) Match(path string) bool {
	if p.exact {
		return path == p.text
	}
	rest, ok := strings.CutPrefix(path, "/")
	return ok && p.glob.Match(rest)
}

// Prefix returns the literal path prefix every matching path starts with (up to the first
// wildcard), for listing candidate streams.
func (p Pattern) Prefix() string {
	var b strings.Builder
	for _, seg := range p.segs {
		if seg == "*" {
			break
		}
		b.WriteString("/")
		b.WriteString(seg)
	}
	if p.exact {
		return b.String()
	}
	return b.String() + "/"
}

// overlaps reports whether some path matches both patterns.
func (p Pattern) overlaps(q Pattern) bool {
	n := min(len(p.segs), len(q.segs))
	for i := range n {
		a, b := p.segs[i], q.segs[i]
		if a != b && a != "*" && b != "*" {
			return false
		}
	}
	switch {
	case p.deep && q.deep:
		return true
	case p.deep:
		return len(q.segs) > len(p.segs)
	case q.deep:
		return len(p.segs) > len(q.segs)
	default:
		return len(p.segs) == len(q.segs)
	}
}

// exactPattern is the pattern of one exact path, as Register and Add take it. It refuses a path
// with a wildcard segment (that is RegisterPattern's job); any other path is taken as given.
func exactPattern(path string) (Pattern, error) {
	for _, seg := range strings.Split(path, "/") {
		if seg == "*" || seg == "**" {
			return Pattern{}, foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"path": path},
				"host: %q is a pattern: register it with RegisterPattern", path)
		}
	}
	return Pattern{text: path, exact: true}, nil
}
