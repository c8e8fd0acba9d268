package rawjson

import (
	"bytes"
	"reflect"
	"sort"
	"strings"
)

// This file updates the encoding of a value when the caller says which members changed. Reencode
// must visit every leaf of the value to find a change; here the caller names the changed members by
// JSON Pointer, and only those are encoded. Each pointer is followed through the Go value and the
// earlier text side by side (the text's top-level index answers the first step without a scan); the
// member it reaches is encoded and spliced in place of its old text, or inserted (at the position
// encoding/json gives it: field order for a struct, key order for a map) or removed. What the
// pointers do not name is copied, not looked at: a wrong declaration leaves old text behind, which
// is why the holder checks the result against a full Reencode (docs/engine.md#declared-changes).
//
// Whenever a pointer cannot be followed exactly — it names no field, an index out of range on
// either side, a value whose encoding the walk does not reproduce (a MarshalJSON type, say), a text
// of another shape — it is widened to its parent, which is then encoded whole; widening to the root
// gives up, and the caller encodes the whole value instead.

// ChangedResult is the outcome of [EncodeChanged].
type ChangedResult struct {
	Text    []byte       // the new encoding
	Index   []MemberSpan // Text's top-level index; valid when Indexed
	Indexed bool
	Ops     []PatchOp // the patch from the earlier text to Text
}

// EncodeChanged returns the encoding of v given prev, the encoding (Marshal output) of an earlier
// value of type prevType, its top-level index (prevIdx, when indexed), and changed, the JSON
// Pointers (RFC 6901) of every member of v whose encoding may differ from prev's. The result is
// Marshal(v) provided the declaration is complete; ok is false when the update cannot be made in
// place (a pointer widens to the root, a member does not encode, prev is not what Marshal writes),
// and the caller then encodes the whole value. prev is only read. The new text is written into buf
// when its capacity suffices (buf must not overlap prev); Text is prev itself when nothing changed.
func EncodeChanged(v any, prev []byte, prevType reflect.Type, prevIdx []MemberSpan, indexed bool, changed []string, buf []byte) (res ChangedResult, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			res, ok = ChangedResult{}, false
		}
	}()
	if len(prev) == 0 || v == nil || len(changed) == 0 {
		if len(changed) == 0 && len(prev) > 0 {
			return ChangedResult{Text: prev, Index: prevIdx, Indexed: indexed}, true
		}
		return ChangedResult{}, false
	}
	c := changes{prev: prev, idx: prevIdx, indexed: indexed, root: reflect.ValueOf(v),
		static: prevType != nil && prevType == reflect.TypeOf(v), containers: map[int]*container{}}
	var edits []*edit
	for _, p := range changed {
		toks, err := parsePointerTokens(p)
		if err != nil || len(toks) == 0 {
			return ChangedResult{}, false
		}
		e, ok := c.follow(toks)
		if !ok {
			return ChangedResult{}, false
		}
		edits = append(edits, e)
	}
	edits = outermost(edits)
	return c.apply(edits, buf)
}

// parsePointerTokens splits an RFC 6901 pointer into its unescaped reference tokens.
func parsePointerTokens(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, ErrMalformed
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		if strings.IndexByte(t, '~') >= 0 {
			t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		toks[i] = t
	}
	return toks, nil
}

// container is one object or array of prev that a pointer passes through, with its members.
type container struct {
	start, end int          // the value's text, '{' or '[' at start
	members    []MemberSpan // in text order, when scanned; for an array, key is empty
	scanned    bool
	plan       *plan // the Go side's plan (kStruct or kMap for an object)
	static     bool  // the text was written from a value of plan's type
	edits      []*edit
}

// edit is one member to encode: the member of c named key (an object) or at index (an array).
type edit struct {
	toks     []string
	c        *container // nil for the root
	key      string
	old      int        // the member's position in c, -1 when absent from prev
	span     MemberSpan // where it is in prev, when present
	nv       reflect.Value
	present  bool // the member is encoded in v
	fieldPos int  // a struct field's position among the plan's fields
}

type changes struct {
	prev       []byte
	idx        []MemberSpan
	indexed    bool
	root       reflect.Value
	static     bool
	containers map[int]*container
}

// concrete follows pointers and interfaces from v to the value whose encoding is written; ok is
// false when one of them is nil (the value encodes as null). static is false after an interface:
// the text there may have been written from a value of another type.
func concrete(v reflect.Value, static bool) (reflect.Value, *plan, bool, bool) {
	for {
		if !v.IsValid() {
			return v, nil, static, false
		}
		p := planOf(v.Type())
		switch p.kind {
		case kPointer:
			if v.IsNil() {
				return v, p, static, false
			}
			v = v.Elem()
		case kInterface:
			if v.IsNil() {
				return v, p, static, false
			}
			v, static = v.Elem(), false
		default:
			return v, p, static, true
		}
	}
}

// containerAt returns the container whose text is prev[start:end]. Its members are found by a scan
// that stops at the one looked for; all of them are listed only for an addition or a removal.
func (c *changes) containerAt(start, end int, p *plan, static bool) (*container, bool) {
	if k, ok := c.containers[start]; ok {
		return k, k.plan == p
	}
	k := &container{start: start, end: end, plan: p, static: static}
	switch {
	case c.prev[start] == '{' && (p.kind == kStruct || p.kind == kMap):
		if start == 0 && c.indexed {
			k.members, k.scanned = c.idx, true
		}
	case c.prev[start] == '[' && (p.kind == kSlice || p.kind == kArray):
	default:
		return nil, false
	}
	c.containers[start] = k
	return k, true
}

// list scans all of k's members, once.
func (k *container) list(b []byte) bool {
	if k.scanned {
		return true
	}
	var ok bool
	if b[k.start] == '{' {
		k.members, ok = scanMembers(b, k.start+1, k.end-1)
	} else {
		k.members, ok = scanElems(b, k.start+1, k.end-1)
	}
	k.scanned = ok
	return ok
}

// seekKey finds the member of object k named key: its position (-1 when absent) and span. A scan
// compares keys in place and, in a map's text (sorted), stops at the first key past key; ok is false
// when the text does not parse.
func (k *container) seekKey(b []byte, key string, sortedMap bool) (pos int, m MemberSpan, ok bool) {
	if k.scanned {
		if i := k.find(key, sortedMap); i >= 0 {
			return i, k.members[i], true
		}
		return -1, MemberSpan{}, true
	}
	to := k.end - 1
	i := k.start + 1
	for n := 0; ; n++ {
		for i < to && (b[i] == ',' || b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
		if i >= to {
			return -1, MemberSpan{}, i == to
		}
		if b[i] != '"' {
			return -1, MemberSpan{}, false
		}
		ke, err := stringEnd(b, i)
		if err != nil || ke > to {
			return -1, MemberSpan{}, false
		}
		raw := b[i+1 : ke-1]
		var cmp int
		if bytes.IndexByte(raw, '\\') < 0 { // compared in place (string(raw) in a comparison does not copy)
			if string(raw) != key {
				cmp = 1
				if string(raw) < key {
					cmp = -1
				}
			}
		} else {
			s, err := unquoteKey(b[i:ke])
			if err != nil {
				return -1, MemberSpan{}, false
			}
			cmp = strings.Compare(s, key)
		}
		j := skipWS(b, ke)
		if j >= to || b[j] != ':' {
			return -1, MemberSpan{}, false
		}
		j = skipWS(b, j+1)
		ve, err := valueEnd(b, j)
		if err != nil || ve > to {
			return -1, MemberSpan{}, false
		}
		if cmp == 0 {
			return n, MemberSpan{key: key, start: i, valStart: j, end: ve}, true
		}
		if cmp > 0 && sortedMap {
			return -1, MemberSpan{}, true
		}
		i = ve
	}
}

// seekIndex finds element n of array k; found is false past its end, ok false when the text does
// not parse.
func (k *container) seekIndex(b []byte, n int) (m MemberSpan, found, ok bool) {
	if k.scanned {
		if n < len(k.members) {
			return k.members[n], true, true
		}
		return MemberSpan{}, false, true
	}
	to := k.end - 1
	i := skipWS(b, k.start+1)
	for e := 0; i < to; e++ {
		if e > 0 {
			if b[i] != ',' {
				return MemberSpan{}, false, false
			}
			i = skipWS(b, i+1)
		}
		end, err := valueEnd(b, i)
		if err != nil || end > to {
			return MemberSpan{}, false, false
		}
		if e == n {
			return MemberSpan{start: i, valStart: i, end: end}, true, true
		}
		i = skipWS(b, end)
	}
	return MemberSpan{}, false, i == to
}

// scanElems locates the elements of an array's body in b[from:to].
func scanElems(b []byte, from, to int) ([]MemberSpan, bool) {
	var out []MemberSpan
	i := skipWS(b, from)
	for i < to {
		if len(out) > 0 {
			if b[i] != ',' {
				return nil, false
			}
			i = skipWS(b, i+1)
		}
		e, err := valueEnd(b, i)
		if err != nil || e > to {
			return nil, false
		}
		out = append(out, MemberSpan{start: i, valStart: i, end: e})
		i = skipWS(b, e)
	}
	return out, i == to
}

// follow resolves toks to the member to encode, widened to a parent where the pointer cannot be
// followed exactly; ok is false when that parent is the root.
func (c *changes) follow(toks []string) (*edit, bool) {
	v, static := c.root, c.static
	start, end := 0, len(c.prev)
	for i, tok := range toks {
		cv, p, st, nonNil := concrete(v, static)
		if !nonNil {
			return c.widen(toks, i)
		}
		k, ok := c.containerAt(start, end, p, st)
		if !ok {
			return c.widen(toks, i)
		}
		e := &edit{toks: toks[:i+1], c: k, key: tok, old: -1}
		switch p.kind {
		case kStruct:
			fi := -1
			for j := range p.fields {
				if f := p.fields[j].key; len(f) == len(tok)+3 && f[1:len(f)-2] == tok {
					fi = j
					break
				}
			}
			if fi < 0 {
				return c.widen(toks, i)
			}
			f := &p.fields[fi]
			e.fieldPos = fi
			e.nv = cv.Field(f.index)
			e.present = !f.omitEmpty || !isEmpty(e.nv)
			if e.old, e.span, ok = k.seekKey(c.prev, tok, false); !ok {
				return c.widen(toks, i)
			}
		case kMap:
			key := reflect.New(p.key).Elem()
			key.SetString(tok)
			e.nv = cv.MapIndex(key)
			e.present = e.nv.IsValid()
			if e.old, e.span, ok = k.seekKey(c.prev, tok, st); !ok {
				return c.widen(toks, i)
			}
		case kSlice, kArray:
			n, inRange := arrayIndex(tok, cv.Len())
			var found bool
			if inRange {
				e.span, found, ok = k.seekIndex(c.prev, n)
			}
			if !inRange || !found || !ok {
				return c.widen(toks, i) // a change of length: the array is encoded whole
			}
			e.nv, e.present, e.old = cv.Index(n), true, n
		default:
			return c.widen(toks, i)
		}
		if (e.old < 0 || !e.present) && !st {
			// Adding or removing needs the member order encoding/json gives, known only when the
			// text was written from a value of this type.
			return c.widen(toks, i)
		}
		if i == len(toks)-1 || e.old < 0 || !e.present {
			return e, true
		}
		v, static, start, end = e.nv, st, e.span.valStart, e.span.end
	}
	return nil, false
}

// widen returns the edit of the member named by toks[:n], or false when that is the root.
func (c *changes) widen(toks []string, n int) (*edit, bool) {
	if n == 0 {
		return nil, false
	}
	return c.follow(toks[:n])
}

// find returns the index of the member named key, or -1; sorted says the members are in key order.
func (k *container) find(key string, sorted bool) int {
	if sorted && k.plan.kind == kMap && len(k.members) > 16 {
		i := sort.Search(len(k.members), func(i int) bool { return k.members[i].key >= key })
		if i < len(k.members) && k.members[i].key == key {
			return i
		}
		return -1
	}
	for i := range k.members {
		if k.members[i].key == key {
			return i
		}
	}
	return -1
}

// outermost drops every edit inside another edit's member, and duplicates.
func outermost(edits []*edit) []*edit {
	sort.Slice(edits, func(i, j int) bool { return lessToks(edits[i].toks, edits[j].toks) })
	out := edits[:0]
	for _, e := range edits {
		if len(out) > 0 && hasPrefix(e.toks, out[len(out)-1].toks) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func lessToks(a, b []string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

func hasPrefix(a, p []string) bool {
	if len(p) > len(a) {
		return false
	}
	for i := range p {
		if a[i] != p[i] {
			return false
		}
	}
	return true
}

func pointerOf(toks []string) string {
	var sb strings.Builder
	for _, t := range toks {
		sb.WriteByte('/')
		sb.WriteString(escapePointer(t))
	}
	return sb.String()
}

// newMember is a member written by a splice, at offset off in the splice's text.
type newMember struct {
	key                 string
	off, valOff, endOff int
}

type changeSplice struct {
	splice
	members []newMember // root members the splice writes (root container only)
}

// apply encodes the edits, splices them into prev and computes the patch.
func (c *changes) apply(edits []*edit, buf []byte) (ChangedResult, bool) {
	var order []*container
	for _, e := range edits {
		if len(e.c.edits) == 0 {
			order = append(order, e.c)
		}
		e.c.edits = append(e.c.edits, e)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].start < order[j].start })
	var ops []PatchOp
	var sps []changeSplice
	for _, k := range order {
		var ok bool
		if ops, sps, ok = c.applyContainer(k, ops, sps); !ok {
			return ChangedResult{}, false
		}
	}
	sort.Slice(sps, func(i, j int) bool {
		if sps[i].from != sps[j].from {
			return sps[i].from < sps[j].from
		}
		return sps[i].to < sps[j].to
	})
	n := len(c.prev)
	for i, s := range sps {
		if i > 0 && s.from < sps[i-1].to {
			return ChangedResult{}, false // cannot happen: edits are disjoint
		}
		n += len(s.text) - (s.to - s.from)
	}
	if len(sps) == 0 {
		return ChangedResult{Text: c.prev, Index: c.idx, Indexed: c.indexed}, true
	}
	out := buf[:0]
	if cap(out) < n {
		out = make([]byte, 0, n+n/16) // room to grow, for when this buffer comes back
	}
	at := 0
	for _, s := range sps {
		out = append(out, c.prev[at:s.from]...)
		out = append(out, s.text...)
		at = s.to
	}
	out = append(out, c.prev[at:]...)
	res := ChangedResult{Text: out, Ops: ops}
	if c.indexed {
		res.Index, res.Indexed = c.reindex(sps), true
	}
	return res, true
}

// applyContainer encodes the edits of one container: a member present on both sides has its value
// replaced; members added or removed rewrite the text between the surviving members around them.
func (c *changes) applyContainer(k *container, ops []PatchOp, sps []changeSplice) ([]PatchOp, []changeSplice, bool) {
	type slot struct {
		e    *edit
		text []byte // the new value
	}
	structural := false
	var slots []slot
	for _, e := range k.edits {
		s := slot{e: e}
		if e.present {
			b, err := marshalValue(e.nv)
			if err != nil {
				return nil, nil, false
			}
			s.text = b
		}
		if e.old < 0 || !e.present {
			structural = true
		}
		slots = append(slots, s)
	}
	// Removes first, in old order; then adds and changes in new order (Diff's order).
	sort.Slice(slots, func(i, j int) bool { return k.before(slots[i].e, slots[j].e) })
	for _, s := range slots {
		if s.e.old >= 0 && !s.e.present {
			ops = append(ops, PatchOp{Op: "remove", Path: pointerOf(s.e.toks)})
		}
	}
	for _, s := range slots {
		switch {
		case s.e.old >= 0 && s.e.present:
			m := s.e.span
			ov := c.prev[m.valStart:m.end]
			if bytes.Equal(ov, s.text) {
				continue
			}
			if err := diffRaw(pointerOf(s.e.toks), ov, s.text, &ops); err != nil {
				return nil, nil, false
			}
			sps = append(sps, changeSplice{splice: splice{from: m.valStart, to: m.end, text: s.text}})
		case s.e.old < 0 && s.e.present:
			ops = append(ops, PatchOp{Op: "add", Path: pointerOf(s.e.toks), Value: s.text})
		}
	}
	if !structural {
		return ops, sps, true
	}
	if !k.list(c.prev) {
		return nil, nil, false
	}
	// Rewrite each run of added and removed members between two surviving members (or an end).
	removed := map[int]bool{}
	var adds []slot
	for _, s := range slots {
		if s.e.old >= 0 && !s.e.present {
			removed[s.e.old] = true
		} else if s.e.old < 0 && s.e.present {
			adds = append(adds, s)
		}
	}
	root := k.start == 0 && c.indexed
	ai := 0
	prevSurvivor := -1
	for j := 0; j <= len(k.members); j++ {
		if j < len(k.members) && removed[j] {
			continue
		}
		// j is a survivor (or the end): the run is the members after prevSurvivor up to j, and the
		// adds that sort before member j.
		var run []slot
		for ai < len(adds) && (j == len(k.members) || k.insertsBefore(adds[ai].e, j)) {
			run = append(run, adds[ai])
			ai++
		}
		if len(run) > 0 || j > prevSurvivor+1 {
			from := k.start + 1
			if prevSurvivor >= 0 {
				from = k.members[prevSurvivor].end
			}
			to := k.end - 1
			if j < len(k.members) {
				to = k.members[j].start
			}
			var text []byte
			var written []newMember
			for i, s := range run {
				if i > 0 || prevSurvivor >= 0 {
					text = append(text, ',')
				}
				off := len(text)
				text = append(text, k.keyText(s.e)...)
				valOff := len(text)
				text = append(text, s.text...)
				written = append(written, newMember{key: s.e.key, off: off, valOff: valOff, endOff: len(text)})
			}
			if j < len(k.members) && (len(run) > 0 || prevSurvivor >= 0) {
				text = append(text, ',') // the separator before member j
			}
			sp := changeSplice{splice: splice{from: from, to: to, text: text}}
			if root {
				sp.members = written
			}
			sps = append(sps, sp)
		}
		prevSurvivor = j
	}
	return ops, sps, true
}

// before orders k's edits as Diff orders its operations: by old position, then additions in their
// new position.
func (k *container) before(a, b *edit) bool {
	if a.old >= 0 && b.old >= 0 {
		return a.old < b.old
	}
	if k.plan.kind == kStruct {
		return a.fieldPos < b.fieldPos
	}
	return a.key < b.key
}

// insertsBefore reports whether the added member of e sorts before member j of k (encoding/json's
// order: field order for a struct, key order for a map).
func (k *container) insertsBefore(e *edit, j int) bool {
	m := k.members[j]
	if k.plan.kind == kMap {
		return e.key < m.key
	}
	for i := range k.plan.fields {
		f := k.plan.fields[i].key
		if f[1:len(f)-2] == m.key {
			return e.fieldPos < i
		}
	}
	return false
}

// keyText is `"key":` for e's member.
func (k *container) keyText(e *edit) []byte {
	if k.plan.kind == kStruct {
		return []byte(k.plan.fields[e.fieldPos].key)
	}
	q, _ := Marshal(e.key)
	return append(q, ':')
}

// reindex returns the top-level index of the spliced text: surviving members shift by the splices
// before them (and an end by the splices inside it), written members take their place.
func (c *changes) reindex(sps []changeSplice) []MemberSpan {
	// shiftTo[i]: total change of the splices [0, i).
	shift := make([]int, len(sps)+1)
	for i, s := range sps {
		shift[i+1] = shift[i] + len(s.text) - (s.to - s.from)
	}
	// Splices are sorted and disjoint, so "to <= p" and "from < p" hold for a prefix of them.
	upTo := func(p int) int { // splices wholly at or before p
		return shift[sort.Search(len(sps), func(i int) bool { return sps[i].to > p })]
	}
	startingBefore := func(p int) int { // splices starting before p
		return shift[sort.Search(len(sps), func(i int) bool { return sps[i].from >= p })]
	}
	out := make([]MemberSpan, 0, len(c.idx))
	si := 0
	emit := func(upto int) { // members written by splices that end at or before upto
		for si < len(sps) && sps[si].to <= upto {
			s := sps[si]
			base := s.from + shift[si]
			for _, m := range s.members {
				out = append(out, MemberSpan{key: m.key, start: base + m.off, valStart: base + m.valOff, end: base + m.endOff})
			}
			si++
		}
	}
	removedAt := func(m MemberSpan) bool { // a member inside a rewritten run was removed
		i := sort.Search(len(sps), func(i int) bool { return sps[i].to > m.start })
		return i < len(sps) && sps[i].from <= m.start && sps[i].to >= m.end && sps[i].from < sps[i].to
	}
	for _, m := range c.idx {
		if removedAt(m) {
			continue
		}
		emit(m.start)
		out = append(out, MemberSpan{key: m.key, start: m.start + upTo(m.start), valStart: m.valStart + upTo(m.valStart), end: m.end + startingBefore(m.end)})
	}
	emit(len(c.prev))
	return out
}
