package rawjson

import (
	"bytes"
	"errors"
	"math"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is the one scanner of request bodies: [Split] validates a body exactly as
// encoding/json's Valid does (same grammar, same nesting limit, no UTF-8 check), and in the same
// pass cuts a top-level array into its messages, compacts those holding whitespace, and notes
// where the named top-level members of each message object are. Everything the server and the
// store ask of a body — is it JSON, what are its messages, what are their "type", "source" and
// idempotency key — is answered from that one pass; nothing parses the body again. [CutArray]
// cuts a stored page of messages with the same grammar.

// MaxDepth is encoding/json's nesting limit.
const MaxDepth = 10000

// maxKeys bounds the names of a [Keys], so a message keeps its members in a fixed array.
const maxKeys = 8

// Keys names the top-level members that [Split] finds in each message that is an object.
type Keys struct {
	names []string
	fold  []byte
}

// NewKeys returns a set of member names for [Split]: up to eight names matched exactly, after
// escapes are decoded, as encoding/json matches a key to a struct field's exact JSON name; and
// fold, when not empty, matched in any letter case with Unicode simple folding, as encoding/json
// folds a key onto a field, each of whose members is reported ([Message.Folded]). It panics when
// given more than eight names (a programming error).
func NewKeys(fold string, names ...string) *Keys {
	if len(names) > maxKeys {
		panic("rawjson: more than 8 member names")
	}
	k := &Keys{names: names}
	if fold != "" {
		k.fold = []byte(fold)
	}
	return k
}

// Kind is a JSON value's kind, one bit each, so the kinds of several values combine.
type Kind uint8

// The kinds of JSON values.
const (
	KindNull Kind = 1 << iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

func kindOf(c byte) Kind {
	switch c {
	case 'n':
		return KindNull
	case 't', 'f':
		return KindBool
	case '"':
		return KindString
	case '[':
		return KindArray
	case '{':
		return KindObject
	}
	return KindNumber
}

// Member is what a scan found of one named member of a message object.
type Member struct {
	// Value is the raw (compact) value of the member's last occurrence — the one encoding/json
	// keeps — or nil when the message has no such member.
	Value []byte
	// Kinds holds the kind of every occurrence's value; encoding/json fails to decode the object
	// into a typed field when any occurrence is of the wrong kind.
	Kinds Kind
}

// String returns the decoded text of the member's last occurrence, and whether that is a
// string.
func (m Member) String() (string, bool) {
	if m.Kinds == 0 || m.Value[0] != '"' {
		return "", false
	}
	return Unquote(m.Value)
}

// Span is the position of a whole member ("key":value) in its message's Raw: Raw[Start:End].
type Span struct{ Start, End int }

// found is where a named member's value is in the message's Raw. 32-bit positions keep a message
// small (Split refuses bodies of 4 GiB or more, ErrTooLong); a batch holds one Message per element.
type found struct {
	start, end uint32
	kinds      Kind
}

// Message is one message of a body: an element of a top-level array, or the body's one value.
type Message struct {
	// Raw is the message's compact text.
	Raw    []byte
	keys   *Keys
	found  [maxKeys]found
	folded []Span
}

// Member returns what the scan found of the i-th name of the Keys the message was split with.
func (m *Message) Member(i int) Member {
	f := m.found[i]
	if f.kinds == 0 {
		return Member{}
	}
	return Member{Value: m.Raw[f.start:f.end:f.end], Kinds: f.kinds}
}

// Own returns the message on a copy of its text, so it outlives the body it was split from.
func (m *Message) Own() Message {
	c := *m
	c.Raw = bytes.Clone(m.Raw)
	return c
}

// Folded returns the positions of the members whose key matches the Keys' fold name in any
// case, in text order.
func (m *Message) Folded() []Span { return m.folded }

// Edit returns the message object without the members at drop (positions in Raw, in text order,
// as [Message.Folded] gives them) and, when value is not nil, with the member of the i-th name set
// to value (appended last). A named member inside a dropped one is absent afterwards. value must
// be one compact JSON value.
func (m *Message) Edit(drop []Span, i int, value []byte) Message {
	out := Message{keys: m.keys, found: m.found}
	raw := make([]byte, 0, len(m.Raw)+len(value)+len(m.keys.names[i])+4)
	// Copy the kept text, each dropped member taking one neighbouring comma with it (the one
	// before it, or for the first member the one after it).
	from := 0
	cut := make([]Span, 0, len(drop)) // what was removed, in Raw
	for _, d := range drop {
		s, e := d.Start, d.End
		if m.Raw[s-1] == ',' && (len(cut) == 0 || cut[len(cut)-1].End < s) {
			s--
		} else if m.Raw[e] == ',' {
			e++
		}
		raw = append(raw, m.Raw[from:s]...)
		cut = append(cut, Span{s, e})
		from = e
	}
	raw = append(raw, m.Raw[from:len(m.Raw)-1]...)
	// moved returns where text at [start, end) of Raw is now, or ok false when it was cut.
	moved := func(start, end int) (int, int, bool) {
		shift := 0
		for _, c := range cut {
			if start >= c.Start && end <= c.End {
				return 0, 0, false
			}
			if c.End <= start {
				shift += c.End - c.Start
			}
		}
		return start - shift, end - shift, true
	}
	for k := range out.found {
		f := &out.found[k]
		if f.kinds == 0 {
			continue
		}
		start, end, ok := moved(int(f.start), int(f.end))
		if !ok {
			*f = found{}
			continue
		}
		f.start, f.end = uint32(start), uint32(end)
	}
	for _, sp := range m.folded {
		if start, end, ok := moved(sp.Start, sp.End); ok {
			out.folded = append(out.folded, Span{start, end})
		}
	}
	if value != nil {
		if raw[len(raw)-1] != '{' {
			raw = append(raw, ',')
		}
		memberStart := len(raw)
		raw = append(raw, '"')
		raw = append(raw, m.keys.names[i]...)
		raw = append(raw, '"', ':')
		out.found[i] = found{start: uint32(len(raw)), end: uint32(len(raw) + len(value)), kinds: kindOf(value[0])}
		raw = append(raw, value...)
		if m.keys.fold != nil && bytes.EqualFold([]byte(m.keys.names[i]), m.keys.fold) {
			out.folded = append(out.folded, Span{memberStart, len(raw)})
		}
	}
	out.Raw = append(raw, '}')
	return out
}

// Replace returns the message object with the value of the i-th name's last occurrence replaced
// by value, in place (the members keep their order), and ok true; it does the same as
// [Message.Edit] with no drop when the message has no such member. It answers ok false, and m
// unchanged, when the member occurs with a value of another kind than value's (only the last
// occurrence would change, and its other occurrences' kinds are not kept apart). value must be one
// compact JSON value.
func (m *Message) Replace(i int, value []byte) (Message, bool) {
	f := m.found[i]
	if f.kinds == 0 {
		return m.Edit(nil, i, value), true
	}
	if f.kinds != kindOf(value[0]) {
		return *m, false
	}
	raw := make([]byte, 0, len(m.Raw)-int(f.end-f.start)+len(value))
	raw = append(raw, m.Raw[:f.start]...)
	raw = append(raw, value...)
	raw = append(raw, m.Raw[f.end:]...)
	shift := len(value) - int(f.end-f.start)
	out := Message{Raw: raw, keys: m.keys, found: m.found}
	for k := range out.found {
		g := &out.found[k]
		if k == i {
			g.end = uint32(int(g.start) + len(value))
		} else if g.kinds != 0 && g.start > f.start {
			g.start, g.end = uint32(int(g.start)+shift), uint32(int(g.end)+shift)
		}
	}
	for _, sp := range m.folded {
		switch {
		case sp.Start > int(f.start):
			sp = Span{sp.Start + shift, sp.End + shift}
		case sp.End >= int(f.end):
			sp.End += shift // the folded member is the replaced one
		}
		out.folded = append(out.folded, sp)
	}
	return out, true
}

// ErrTooMany reports a body with more messages than [Split] was allowed to return.
var ErrTooMany = errors.New("rawjson: too many messages")

// ErrTooLong reports a body of 4 GiB or more, past what a [Message] can note positions in.
var ErrTooLong = errors.New("rawjson: body too long")

// maxBody is the longest body [Split] and [ScanValue] scan.
const maxBody = math.MaxUint32

var splits atomic.Int64

// Splits returns how many bodies [Split] has scanned in this process: the tests count the
// parses of a request with it.
func Splits() int64 { return splits.Load() }

// Split validates body as one JSON value with optional whitespace around it, exactly as
// encoding/json's Valid does (no UTF-8 check), and returns its messages: the elements of a
// top-level array (isArray), or the value itself. Each message is compact (a message with
// whitespace outside its strings is copied without it; the others are slices of body), and in a
// message object the members named by keys (nil: none) are found. A malformed body returns
// [ErrMalformed]; a valid array of more than limit elements (limit > 0) returns [ErrTooMany]
// and count, without the messages.
func Split(body []byte, keys *Keys, limit int) (msgs []Message, isArray bool, count int, err error) {
	splits.Add(1)
	if int64(len(body)) > maxBody {
		return nil, false, 0, ErrTooLong
	}
	s := &splitter{b: body, keys: keys, limit: limit}
	s.skipWS()
	if s.i >= len(body) {
		return nil, false, 0, ErrMalformed
	}
	if body[s.i] != '[' {
		if !s.message() {
			return nil, false, 0, ErrMalformed
		}
		s.skipWS()
		if s.i != len(body) {
			return nil, false, 0, ErrMalformed
		}
		return s.msgs, false, 1, nil
	}
	s.i++
	s.depth = 1
	s.skipWS()
	if s.i < len(body) && body[s.i] == ']' {
		s.i++
	} else {
		for {
			s.skipWS()
			if !s.message() {
				return nil, false, 0, ErrMalformed
			}
			s.skipWS()
			if s.i >= len(body) {
				return nil, false, 0, ErrMalformed
			}
			if body[s.i] == ',' {
				s.i++
				continue
			}
			if body[s.i] != ']' {
				return nil, false, 0, ErrMalformed
			}
			s.i++
			break
		}
	}
	s.skipWS()
	if s.i != len(body) {
		return nil, false, 0, ErrMalformed
	}
	if limit > 0 && s.count > limit {
		return nil, true, s.count, ErrTooMany
	}
	return s.msgs, true, s.count, nil
}

// ScanValue validates b as one JSON value with optional whitespace around it, as [Split] does,
// and returns it as one message (an array is not split).
func ScanValue(b []byte, keys *Keys) (Message, error) {
	splits.Add(1)
	if int64(len(b)) > maxBody {
		return Message{}, ErrTooLong
	}
	s := &splitter{b: b, keys: keys}
	s.skipWS()
	if s.i >= len(b) || !s.message() {
		return Message{}, ErrMalformed
	}
	s.skipWS()
	if s.i != len(b) {
		return Message{}, ErrMalformed
	}
	return s.msgs[0], nil
}

// CutArray returns a JSON array of the first n elements of the array body, which must be
// well-formed; n must not exceed the elements body holds.
func CutArray(body []byte, n int) ([]byte, error) {
	if n == 0 {
		return []byte("[]"), nil
	}
	s := &splitter{b: body}
	s.skipWS()
	if s.i >= len(body) || body[s.i] != '[' {
		return nil, ErrMalformed
	}
	s.i++
	s.depth = 1
	for seen := 0; ; {
		s.skipWS()
		if !s.value() {
			return nil, ErrMalformed
		}
		seen++
		end := s.i
		s.skipWS()
		if s.i >= len(body) || (body[s.i] != ',' && body[s.i] != ']') {
			return nil, ErrMalformed
		}
		if seen == n {
			out := make([]byte, 0, end+1)
			return append(append(out, body[:end]...), ']'), nil
		}
		if body[s.i] == ']' {
			return nil, errors.New("rawjson: the array holds fewer elements than asked for")
		}
		s.i++
	}
}

// splitter is one scan. While it is inside a message (in), the message's compact text is
// b[from:i] appended to out[outStart:] once whitespace was dropped (copying), and plain
// b[from:i] before: rel gives a position of b as one in the compact message.
type splitter struct {
	b     []byte
	i     int
	depth int
	keys  *Keys
	limit int
	count int
	msgs  []Message

	in       bool
	copying  bool
	from     int
	out      []byte // the compact copies of all messages, cap len(b): never reallocated
	outStart int
	cur      *Message
	scratch  []byte
}

func (s *splitter) rel(j int) int { return len(s.out) - s.outStart + j - s.from }

func (s *splitter) skipWS() {
	j := s.i
	for j < len(s.b) {
		switch s.b[j] {
		case ' ', '\t', '\n', '\r':
			j++
			continue
		}
		break
	}
	if j > s.i && s.in {
		if s.out == nil {
			s.out = make([]byte, 0, len(s.b))
		}
		s.out = append(s.out, s.b[s.from:s.i]...)
		s.copying = true
		s.from = j
	}
	s.i = j
}

// message scans one message starting at s.i (no leading whitespace) and records it. The message
// is filled in place in s.msgs (a failed scan fails the whole split), which is sized once from the
// first message: a batch of like messages takes one allocation for all of them.
func (s *splitter) message() bool {
	s.count++
	record := s.limit <= 0 || s.count <= s.limit
	var m *Message
	if record {
		if len(s.msgs) == cap(s.msgs) {
			s.growMsgs()
		}
		s.msgs = s.msgs[:len(s.msgs)+1]
		m = &s.msgs[len(s.msgs)-1]
		*m = Message{}
	}
	s.in, s.copying, s.from, s.outStart = record, false, s.i, len(s.out)
	start := s.i
	if record && s.keys != nil && s.i < len(s.b) && s.b[s.i] == '{' {
		m.keys = s.keys
		s.cur = m
	}
	ok := s.value()
	s.cur = nil
	s.in = false
	if !ok || !record {
		return ok
	}
	if s.copying {
		s.out = append(s.out, s.b[s.from:s.i]...)
		m.Raw = s.out[s.outStart:len(s.out):len(s.out)]
	} else {
		m.Raw = s.b[start:s.i:s.i]
	}
	return true
}

// growMsgs makes room for another message: one for the first, then as many as the rest of the
// body holds if its messages are as long as the first (plus a separator), then doubling.
func (s *splitter) growMsgs() {
	n := 1
	switch len(s.msgs) {
	case 0:
	case 1:
		n = 1 + (len(s.b)-s.i)/(len(s.msgs[0].Raw)+1) + 1
	default:
		n = 2 * len(s.msgs)
	}
	if s.limit > 0 {
		n = min(n, s.limit)
	}
	n = max(n, len(s.msgs)+1)
	grown := make([]Message, len(s.msgs), n)
	copy(grown, s.msgs)
	s.msgs = grown
}

// value scans one value starting at s.i (no leading whitespace).
func (s *splitter) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		ok, _ := s.str()
		return ok
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

func (s *splitter) enter() bool {
	s.depth++
	return s.depth <= MaxDepth
}

func (s *splitter) object() bool {
	m := s.cur // the message's own members are the ones to find
	s.cur = nil
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
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		ks, memberStart := s.i, s.rel(s.i)
		ok, escaped := s.str()
		if !ok {
			return false
		}
		ke := s.i
		s.skipWS()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.skipWS()
		valStart, kind := s.rel(s.i), Kind(0)
		if s.i < len(s.b) {
			kind = kindOf(s.b[s.i])
		}
		if !s.value() {
			return false
		}
		if m != nil {
			s.note(m, s.b[ks+1:ke-1], escaped, memberStart, valStart, s.rel(s.i), kind)
		}
		if done, ok := s.afterMember('}'); done {
			return ok
		}
	}
}

// note records a member of message m if its key (raw, between the quotes) is one of the names.
func (s *splitter) note(m *Message, key []byte, escaped bool, memberStart, valStart, valEnd int, kind Kind) {
	if escaped {
		s.scratch = unquoteInto(s.scratch[:0], key)
		key = s.scratch
	}
	for n, name := range s.keys.names {
		if string(key) == name {
			f := &m.found[n]
			f.start, f.end = uint32(valStart), uint32(valEnd)
			f.kinds |= kind
		}
	}
	if s.keys.fold != nil && bytes.EqualFold(key, s.keys.fold) {
		m.folded = append(m.folded, Span{memberStart, valEnd})
	}
}

func (s *splitter) array() bool {
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
func (s *splitter) afterMember(closing byte) (done, ok bool) {
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

// str scans a string starting at its opening quote and reports whether it holds escapes.
func (s *splitter) str() (ok, escaped bool) {
	s.i++ // opening quote
	for s.i < len(s.b) {
		// Plain bytes first, in a loop on locals: most of a message is string text.
		b, i := s.b, s.i
		for i < len(b) && plainInString[b[i]] {
			i++
		}
		s.i = i
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s.i++
			return true, escaped
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return false, escaped
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return false, escaped
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false, escaped
					}
				}
				s.i += 5
			default:
				return false, escaped
			}
		case c < 0x20:
			return false, escaped
		default:
			s.i++
		}
	}
	return false, escaped
}

// plainInString holds the bytes a string may hold as they are: not a quote, a backslash or a
// control character.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *splitter) lit(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

func (s *splitter) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *splitter) number() bool {
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

// Unquote decodes a well-formed JSON string token (quotes included) as encoding/json does:
// escapes decoded, invalid UTF-8 and unpaired surrogates replaced by U+FFFD. ok is false when q
// is not a quoted token.
func Unquote(q []byte) (string, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", false
	}
	body := q[1 : len(q)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	return string(unquoteInto(nil, body)), true
}

// unquoteInto appends the decoded text of a well-formed string's body (between its quotes).
func unquoteInto(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			if c < utf8.RuneSelf {
				dst = append(dst, c)
				i++
				continue
			}
			r, n := utf8.DecodeRune(b[i:])
			dst = utf8.AppendRune(dst, r) // RuneError for an invalid byte, as encoding/json
			i += n
			continue
		}
		if i+1 >= len(b) {
			return dst
		}
		switch e := b[i+1]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(b[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if d := utf16.DecodeRune(r, hex4(b[i+2:])); d != utf8.RuneError {
						dst = utf8.AppendRune(dst, d)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}

func hex4(b []byte) rune {
	if len(b) < 4 {
		return utf8.RuneError
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}
