package stream

// A one-pass JSON validator and splitter for protocol bodies: it accepts exactly what
// encoding/json's Valid accepts (same grammar, same nesting limit, no UTF-8 check), and while it
// validates it cuts a top-level array into its elements and notes which of them hold whitespace
// outside strings (only those need compacting). Validating and splitting in separate passes was
// a fifth of the server's CPU on batched appends (docs/bench.md).

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

type jsonScanner struct {
	b     []byte
	i     int
	depth int
	ws    bool // whitespace seen outside strings since the last reset
}

// jsonSpan is one element of a top-level array: b[start:end], and whether it holds whitespace
// outside strings.
type jsonSpan struct {
	start, end int
	ws         bool
}

// scanJSONBody validates b as one JSON value (whitespace around it allowed). When the value is an
// array it returns the spans of its elements and isArray; otherwise the span of the value.
func scanJSONBody(b []byte) (spans []jsonSpan, isArray, ok bool) {
	s := &jsonScanner{b: b}
	s.skipWS()
	if s.i >= len(b) {
		return nil, false, false
	}
	if b[s.i] != '[' {
		start := s.i
		s.ws = false
		if !s.value() {
			return nil, false, false
		}
		end, ws := s.i, s.ws
		s.skipWS()
		if s.i != len(b) {
			return nil, false, false
		}
		return []jsonSpan{{start, end, ws}}, false, true
	}
	s.i++
	s.depth = 1
	s.skipWS()
	if s.i < len(b) && b[s.i] == ']' {
		s.i++
	} else {
		for {
			s.skipWS()
			start := s.i
			s.ws = false
			if !s.value() {
				return nil, false, false
			}
			spans = append(spans, jsonSpan{start, s.i, s.ws})
			s.skipWS()
			if s.i >= len(b) {
				return nil, false, false
			}
			if b[s.i] == ',' {
				s.i++
				continue
			}
			if b[s.i] != ']' {
				return nil, false, false
			}
			s.i++
			break
		}
	}
	s.skipWS()
	if s.i != len(b) {
		return nil, false, false
	}
	return spans, true, true
}

func (s *jsonScanner) skipWS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			s.ws = true
		default:
			return
		}
	}
}

// value scans one value starting at s.i (no leading whitespace).
func (s *jsonScanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		return s.str()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

func (s *jsonScanner) enter() bool {
	s.depth++
	return s.depth <= maxJSONDepth
}

func (s *jsonScanner) object() bool {
	if !s.enter() {
		return false
	}
	s.i++ // {
	s.skipWS()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		s.skipWS()
		if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
			return false
		}
		s.skipWS()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.skipWS()
		if !s.value() {
			return false
		}
		if done, ok := s.afterMember('}'); done {
			return ok
		}
	}
}

func (s *jsonScanner) array() bool {
	if !s.enter() {
		return false
	}
	s.i++ // [
	s.skipWS()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		s.skipWS()
		if !s.value() {
			return false
		}
		if done, ok := s.afterMember(']'); done {
			return ok
		}
	}
}

// afterMember reads what follows a member of an object or an element of an array: a comma
// (done false: another member follows) or the closing byte (done and ok). Anything else, or the
// end of the input, is done and not ok.
func (s *jsonScanner) afterMember(closing byte) (done, ok bool) {
	s.skipWS()
	if s.i >= len(s.b) {
		return true, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, false
	case closing:
		s.i++
		s.depth--
		return true, true
	}
	return true, false
}

func (s *jsonScanner) str() bool {
	s.i++ // opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *jsonScanner) lit(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

func (s *jsonScanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *jsonScanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return false
	}
	if s.b[s.i] == '0' {
		s.i++
	} else if s.digits() == 0 {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}
