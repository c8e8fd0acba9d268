package rawjson

import (
	"encoding/binary"
	"sort"
)

// This file makes the diff of a large object cost little more than the change: the live-state holder
// keeps an index of its base's top-level members, and the next value's text is compared with the
// base's as a common prefix and suffix. Members wholly inside either are byte-identical on both
// sides and are neither scanned nor diffed; only the members overlapping the changed window are
// parsed and diffed (recursively, with Diff). The next value's index is assembled from the
// base's without rescanning.

// MemberSpan locates one top-level member of an indexed object: the key's opening quote at start, the value at
// [valStart, end).
type MemberSpan struct {
	key             string
	start, valStart int
	end             int
}

// IndexObject scans a top-level JSON object (as encoding/json writes it: no surrounding space) and
// returns its members; ok is false when b is not such an object.
func IndexObject(b []byte) ([]MemberSpan, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	return scanMembers(b, 1, len(b)-1)
}

// scanMembers parses the members of an object's body in b[from:to]; the scan must end exactly at
// to, or ok is false.
func scanMembers(b []byte, from, to int) ([]MemberSpan, bool) {
	var out []MemberSpan
	i := from
	for {
		for i < to && (b[i] == ',' || b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
		if i == to {
			return out, true
		}
		if i > to || b[i] != '"' {
			return nil, false
		}
		ke, err := stringEnd(b, i)
		if err != nil || ke > to {
			return nil, false
		}
		key, err := unquoteKey(b[i:ke])
		if err != nil {
			return nil, false
		}
		j := skipWS(b, ke)
		if j >= to || b[j] != ':' {
			return nil, false
		}
		j = skipWS(b, j+1)
		ve, err := valueEnd(b, j)
		if err != nil || ve > to {
			return nil, false
		}
		out = append(out, MemberSpan{key: key, start: i, valStart: j, end: ve})
		i = ve
	}
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(a[i:]) != binary.LittleEndian.Uint64(b[i:]) {
			break
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(a[len(a)-i-8:]) != binary.LittleEndian.Uint64(b[len(b)-i-8:]) {
			break
		}
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// DiffIndexed diffs object a (indexed by aIdx) against b with the same result as Diff(a, b),
// and returns b's index. ok is false when the shortcut does not apply (b is not an object, or the
// changed window does not parse as whole members); the caller then falls back to Diff.
func DiffIndexed(a []byte, aIdx []MemberSpan, b []byte) (ops []PatchOp, bIdx []MemberSpan, ok bool) {
	return DiffIndexedWindow(a, aIdx, b, -1, -1)
}

// DiffIndexedWindow is [DiffIndexed] told a common prefix and a common suffix of a and b (as
// [ReencodeTo] reports them; any lengths not above the longest do), which then need no scan; a
// negative length is measured.
func DiffIndexedWindow(a []byte, aIdx []MemberSpan, b []byte, prefix, suffix int) (ops []PatchOp, bIdx []MemberSpan, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' || len(a) < 2 {
		return nil, nil, false
	}
	p := prefix
	if p < 0 {
		p = commonPrefix(a, b)
	}
	if p == len(a) && p == len(b) {
		return nil, aIdx, true
	}
	s := suffix
	if s < 0 || s > min(len(a), len(b))-p {
		s = commonSuffix(a[p:], b[p:])
	}
	delta := len(b) - len(a)
	// Members [0, lo) end inside the common prefix; members [hi, n) start inside the common suffix.
	lo := sort.Search(len(aIdx), func(i int) bool { return aIdx[i].end > p })
	hi := sort.Search(len(aIdx), func(i int) bool { return aIdx[i].start >= len(a)-s })
	if hi < lo {
		return nil, nil, false
	}
	from := 1
	if lo > 0 {
		from = aIdx[lo-1].end
	}
	to := len(b) - 1
	if hi < len(aIdx) {
		to = aIdx[hi].start + delta
	}
	if from > to {
		return nil, nil, false
	}
	mid, ok := scanMembers(b, from, to)
	if !ok {
		return nil, nil, false
	}
	old := aIdx[lo:hi]
	oldVal := make(map[string][]byte, len(old))
	for _, m := range old {
		oldVal[m.key] = a[m.valStart:m.end]
	}
	newKeys := make(map[string]struct{}, len(mid))
	for _, m := range mid {
		newKeys[m.key] = struct{}{}
	}
	for _, m := range old {
		if _, ok := newKeys[m.key]; !ok {
			ops = append(ops, PatchOp{Op: "remove", Path: "/" + escapePointer(m.key)})
		}
	}
	for _, m := range mid {
		path := "/" + escapePointer(m.key)
		if ov, ok := oldVal[m.key]; ok {
			if err := diffRaw(path, ov, b[m.valStart:m.end], &ops); err != nil {
				return nil, nil, false
			}
		} else {
			ops = append(ops, PatchOp{Op: "add", Path: path, Value: b[m.valStart:m.end]})
		}
	}
	bIdx = make([]MemberSpan, 0, lo+len(mid)+len(aIdx)-hi)
	bIdx = append(bIdx, aIdx[:lo]...)
	bIdx = append(bIdx, mid...)
	for _, m := range aIdx[hi:] {
		bIdx = append(bIdx, MemberSpan{key: m.key, start: m.start + delta, valStart: m.valStart + delta, end: m.end + delta})
	}
	return ops, bIdx, true
}
