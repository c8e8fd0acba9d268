package rawjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNullPatch is returned by [Apply] for a null patch: the client must re-seed.
var ErrNullPatch = errors.New("foldstream: null patch: re-seed from a live snapshot")

// Apply applies a live-state patch (a JSON array of add/replace/remove operations, or null) to doc
// and returns the new document; doc is not modified. The rules are docs/engine.md#applying-a-delta:
// each op resolves its parent by JSON Pointer; a "__proto__" segment is refused; an array add at
// "-" appends and at an index inserts; remove at the root, a missing path or a non-container parent
// is an error. Numbers keep their text.
//
// (github.com/evanphx/json-patch/v5 v5.9.11 silently skips operations whose pointer has an empty
// key segment, such as "//-"; fuzzing found it, so the applier is written here and the tests use
// that library as an oracle for the other paths.)
func Apply(doc, patch json.RawMessage) (json.RawMessage, error) {
	if IsAbsent(patch) {
		return nil, ErrNullPatch
	}
	var ops []PatchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("apply patch: %w", err)
	}
	root, err := DecodeNumbers(doc)
	if err != nil {
		return nil, fmt.Errorf("apply patch: document: %w", err)
	}
	for _, op := range ops {
		segs, err := parsePointer(op.Path)
		if err != nil {
			return nil, err
		}
		var val any
		if op.Op == "add" || op.Op == "replace" {
			if val, err = DecodeNumbers(op.Value); err != nil {
				return nil, fmt.Errorf("apply patch: %s %q: value: %w", op.Op, op.Path, err)
			}
		} else if op.Op != "remove" {
			return nil, fmt.Errorf("apply patch: unsupported op %q", op.Op)
		}
		if len(segs) == 0 {
			if op.Op == "remove" {
				return nil, fmt.Errorf("apply patch: remove at the root")
			}
			root = val
			continue
		}
		if root, err = applyAt(root, segs, op, val); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("apply patch: %w", err)
	}
	return out, nil
}

func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("apply patch: path %q is not a JSON Pointer", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		s = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
		if s == "__proto__" {
			return nil, fmt.Errorf("apply patch: refused path %q", p)
		}
		segs[i] = s
	}
	return segs, nil
}

// arrayIndex parses an RFC 6901 array index (no sign, no leading zeros) below limit.
func arrayIndex(s string, limit int) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' || n > limit {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n < limit
}

// applyAt applies op at segs below node and returns the (possibly new) node.
func applyAt(node any, segs []string, op PatchOp, val any) (any, error) {
	seg := segs[0]
	last := len(segs) == 1
	switch n := node.(type) {
	case map[string]any:
		child, ok := n[seg]
		if !last {
			if !ok {
				return nil, fmt.Errorf("apply patch: %s %q: missing path", op.Op, op.Path)
			}
			nc, err := applyAt(child, segs[1:], op, val)
			if err != nil {
				return nil, err
			}
			n[seg] = nc
			return n, nil
		}
		switch op.Op {
		case "add":
			n[seg] = val
		case "replace":
			if !ok {
				return nil, fmt.Errorf("apply patch: replace %q: missing path", op.Path)
			}
			n[seg] = val
		case "remove":
			if !ok {
				return nil, fmt.Errorf("apply patch: remove %q: missing path", op.Path)
			}
			delete(n, seg)
		}
		return n, nil
	case []any:
		if last && op.Op == "add" {
			if seg == "-" {
				return append(n, val), nil
			}
			i, ok := arrayIndex(seg, len(n)+1)
			if !ok {
				return nil, fmt.Errorf("apply patch: add %q: bad array index", op.Path)
			}
			return slices.Insert(n, i, val), nil
		}
		i, ok := arrayIndex(seg, len(n))
		if !ok {
			return nil, fmt.Errorf("apply patch: %s %q: bad array index", op.Op, op.Path)
		}
		if !last {
			nc, err := applyAt(n[i], segs[1:], op, val)
			if err != nil {
				return nil, err
			}
			n[i] = nc
			return n, nil
		}
		if op.Op == "replace" {
			n[i] = val
			return n, nil
		}
		return slices.Delete(n, i, i+1), nil
	default:
		return nil, fmt.Errorf("apply patch: %s %q: parent is not a container", op.Op, op.Path)
	}
}
