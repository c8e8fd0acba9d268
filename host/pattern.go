package host

import (
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// Pattern is a stream path pattern that [RegisterPattern] runs a processor on (see
// docs/store.md#path-patterns). A pattern is a path made of "/"-separated segments:
//
//   - a literal segment matches itself: "/carts" matches only "/carts";
//   - "*" as a whole segment matches exactly one segment: "/carts/*" matches "/carts/42" but not
//     "/carts" or "/carts/42/items";
//   - "**" as the last segment matches one or more segments below the prefix before it:
//     "/tenants/acme/**" matches "/tenants/acme/orders" and "/tenants/acme/orders/7", not
//     "/tenants/acme" itself.
//
// "*" and "**" are wildcards only as whole segments ("/a*b" is a literal segment); "**" is allowed
// only last; empty segments ("//", a trailing "/") are refused.
type Pattern struct {
	text  string
	segs  []string // the segments before a trailing "**"
	deep  bool     // ends with "**"
	exact bool     // no wildcard at all
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
	segs := strings.Split(s[1:], "/")
	p := Pattern{text: s, exact: true}
	for i, seg := range segs {
		switch seg {
		case "":
			return bad("empty segments are not allowed")
		case "**":
			if i != len(segs)-1 {
				return bad("** is allowed only as the last segment")
			}
			p.deep, p.exact = true, false
			segs = segs[:i]
		case "*":
			p.exact = false
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
	if !strings.HasPrefix(path, "/") {
		return false
	}
	rest := path[1:]
	for _, seg := range p.segs {
		if rest == "" {
			return false
		}
		got, tail, more := strings.Cut(rest, "/")
		if got == "" || (seg != "*" && seg != got) {
			return false
		}
		if !more {
			rest = ""
			if p.deep {
				return false // "**" needs one more segment
			}
			continue
		}
		rest = tail
		if rest == "" {
			return false // a trailing "/" is an empty segment
		}
	}
	if p.deep {
		return rest != "" && !strings.Contains("/"+rest+"/", "//")
	}
	return rest == ""
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
