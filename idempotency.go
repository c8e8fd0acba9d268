package foldstream

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
)

// ProcessorKeyPrefix begins the idempotency key of every event a processor emits through
// [ProcessEventArgs.Append]: the engine stores the key the processor gave (usually
// "<slug>/<key>" from [Base.IdempotencyKey]) as ProcessorKeyPrefix + key. The server refuses HTTP
// writes whose key starts with it (code RESERVED_IDEMPOTENCY_KEY), so no outside writer can take a
// key a processor will emit and wedge it with a conflict (docs/engine.md#emitted-idempotency-keys).
const ProcessorKeyPrefix = "processor:"

// ProcessorKey returns key in the processor namespace: ProcessorKeyPrefix + key, or key itself when
// it is empty or already carries the prefix. The engine applies it to every emitted event, so a
// retried batch that emits the same key dedupes against the first attempt's event.
func ProcessorKey(key string) string {
	if key == "" || strings.HasPrefix(key, ProcessorKeyPrefix) {
		return key
	}
	return ProcessorKeyPrefix + key
}

// SameIdempotentEvent reports whether a retried input names the same event as an existing one
// (spec §13.4): equal type, deep-equal payload and deep-equal metadata, key order irrelevant.
// Metadata present on one side only is different, and so is absent versus an empty object. Source,
// offset and the ephemeral flag are not compared.
func SameIdempotentEvent(existing Event, requested EventInput) bool {
	return existing.Type == requested.Type &&
		rawJSONEqual(existing.Payload, requested.Payload) &&
		rawJSONEqual(existing.Metadata, requested.Metadata)
}

func rawJSONEqual(a, b json.RawMessage) bool {
	aAbsent, bAbsent := isAbsentJSON(a), isAbsentJSON(b)
	if aAbsent || bAbsent {
		return aAbsent == bAbsent
	}
	if bytes.Equal(a, b) {
		return true
	}
	var av, bv any
	if json.Unmarshal(a, &av) != nil || json.Unmarshal(b, &bv) != nil {
		return false
	}
	return JSONEqual(av, bv)
}

// JSONEqual is deep equality over decoded JSON values (spec §12.3 jsonEqual): primitives by value,
// arrays element-wise, objects by equal key sets and equal values, key order irrelevant. Numbers may
// be float64, json.Number or any Go integer type; they compare by numeric value.
func JSONEqual(a, b any) bool {
	switch av := a.(type) {
	case nil:
		return b == nil
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !JSONEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !JSONEqual(x, y) {
				return false
			}
		}
		return true
	}
	an, aok := toFloat(a)
	bn, bok := toFloat(b)
	if aok && bok {
		// Same-value semantics: NaN equals NaN.
		return an == bn || (math.IsNaN(an) && math.IsNaN(bn))
	}
	return false
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
