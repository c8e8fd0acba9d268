package foldtype

import (
	"encoding/json"

	"github.com/foldstream/foldstream/internal/rawjson"
)

// ProcessorKeyPrefix begins the idempotency key of every event a processor emits through
// [ProcessEventArgs.Append]: the engine stores the key the processor gave (usually
// "<slug>/<key>" from [Base.IdempotencyKey]) as ProcessorKeyPrefix + key. The server refuses HTTP
// writes whose key starts with it (code RESERVED_IDEMPOTENCY_KEY), so no outside writer can take a
// key a processor will emit and wedge it with a conflict (docs/engine.md#emitted-idempotency-keys).
const ProcessorKeyPrefix = "processor:"

// SameIdempotentEvent reports whether a retried input names the same event as an existing one
// (docs/engine.md#idempotency): equal type, deep-equal payload and deep-equal metadata, key order
// irrelevant. Metadata present on one side only is different, and so is absent versus an empty
// object. The trace context in metadata ([MetadataTraceParent], [MetadataTraceState]) is not
// compared: it names the span that wrote the event, which a retry changes (an object holding
// nothing else then counts as absent). Source, offset and the ephemeral flag are not compared;
// numbers compare by exact value.
// The store and the test stand-ins use it; a custom [Stream] should too.
func SameIdempotentEvent(existing Event, requested EventInput) bool {
	return existing.Type == requested.Type &&
		rawJSONEqual(existing.Payload, requested.Payload) &&
		metadataEqual(existing.Metadata, requested.Metadata)
}

func rawJSONEqual(a, b json.RawMessage) bool {
	aAbsent, bAbsent := rawjson.IsAbsent(a), rawjson.IsAbsent(b)
	if aAbsent || bAbsent {
		return aAbsent == bAbsent
	}
	return rawjson.Equal(a, b)
}
