package rawjson

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// PatchOp is one RFC 6902 operation of a live-state patch: add, replace or remove.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// Diff computes the live-state patch (docs/engine.md#live-state) from JSON text a to JSON text b; an empty result
// means the values are deep-equal. Objects: removes for vanished keys (old order), then adds for
// new keys and a recursive diff for shared keys (new order); arrays: "/-" adds when b extends a,
// tail removes (highest index first) when b is a prefix of a, else one replace; anything else one
// replace. Subtrees whose text is byte-identical are skipped without being decoded, so a small
// change in a large document costs a scan, not a decode. Both sides must be valid JSON as
// produced by encoding/json (no duplicate keys).
func Diff(a, b []byte) ([]PatchOp, error) {
	var ops []PatchOp
	if err := diffRaw("", a, b, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func diffRaw(path string, a, b []byte, ops *[]PatchOp) error {
	if bytes.Equal(a, b) {
		return nil
	}
	ka, kb := rawKind(a), rawKind(b)
	switch {
	case ka == '{' && kb == '{':
		am, err := objectMembers(a)
		if err != nil {
			return err
		}
		bm, err := objectMembers(b)
		if err != nil {
			return err
		}
		old := make(map[string][]byte, len(am))
		for _, m := range am {
			old[m.key] = m.val
		}
		nw := make(map[string]struct{}, len(bm))
		for _, m := range bm {
			nw[m.key] = struct{}{}
		}
		for _, m := range am {
			if _, ok := nw[m.key]; !ok {
				*ops = append(*ops, PatchOp{Op: "remove", Path: path + "/" + escapePointer(m.key)})
			}
		}
		for _, m := range bm {
			p := path + "/" + escapePointer(m.key)
			if ov, ok := old[m.key]; ok {
				if err := diffRaw(p, ov, m.val, ops); err != nil {
					return err
				}
			} else {
				*ops = append(*ops, PatchOp{Op: "add", Path: p, Value: m.val})
			}
		}
		return nil
	case ka == '[' && kb == '[':
		ae, err := arrayElems(a)
		if err != nil {
			return err
		}
		be, err := arrayElems(b)
		if err != nil {
			return err
		}
		p := 0
		for p < len(ae) && p < len(be) && Equal(ae[p], be[p]) {
			p++
		}
		switch {
		case p == len(ae) && p == len(be):
		case p == len(ae):
			for _, v := range be[p:] {
				*ops = append(*ops, PatchOp{Op: "add", Path: path + "/-", Value: v})
			}
		case p == len(be):
			for i := len(ae) - 1; i >= p; i-- {
				*ops = append(*ops, PatchOp{Op: "remove", Path: path + "/" + strconv.Itoa(i)})
			}
		default:
			*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: b})
		}
		return nil
	default:
		if ka == 0 || kb == 0 {
			return ErrMalformed
		}
		if Equal(a, b) {
			return nil
		}
		*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: b})
		return nil
	}
}
