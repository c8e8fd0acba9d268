package foldstream

import (
	"encoding/json"

	"github.com/foldstream/foldstream/internal/rawjson"
)

// isAbsentJSON reports whether raw is absent: empty or the literal null.
func isAbsentJSON(raw json.RawMessage) bool { return rawjson.IsAbsent(raw) }

// marshalJSON is json.Marshal without HTML escaping, so the text is what JavaScript's
// JSON.stringify writes: "<", ">" and "&" stay one character each. The checkpoint and patch
// ceilings count this text (docs/engine.md#checkpoints, docs/engine.md#live-state), and
// json.Marshal's six-character \u003c escapes would make a state full of markup look up to six
// times its size. (encoding/json still escapes U+2028 and U+2029 unconditionally; those two count
// 6 instead of 1.)
func marshalJSON(v any) ([]byte, error) { return rawjson.Marshal(v) }
