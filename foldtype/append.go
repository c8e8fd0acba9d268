package foldtype

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// MaxEventBytes is the ceiling on one event's stored body, 8 MiB counted in UTF-8 bytes of its JSON
// (createdAt included). A larger event refuses its whole append with code EVENT_TOO_LARGE
// (docs/engine.md#appending-events).
const MaxEventBytes = 8 << 20

// createdAtOverhead is what `,"createdAt":"2006-01-02T15:04:05.000Z"` adds to a stored body.
const createdAtOverhead = len(`,"createdAt":"2006-01-02T15:04:05.000Z"`)

// PrepareEventInput checks input number index of an append the way every stream does, the durable
// store and the test stand-ins alike, so a processor's unit tests refuse what production refuses
// (docs/engine.md#appending-events):
//
//   - the type must be non-empty after trimming spaces (INVALID_EVENT);
//   - the type and the idempotency key must be valid UTF-8 (INVALID_EVENT): JSON would silently
//     replace invalid bytes, so the stored event would differ from its receipt and from the key a
//     retry looks up;
//   - a present payload and metadata must be valid JSON (INVALID_EVENT);
//   - the stored body must fit [MaxEventBytes] (EVENT_TOO_LARGE).
//
// It returns the input with payload and metadata compacted (an absent value, empty or null,
// becomes nil) and the stored body's JSON without createdAt. A custom [Stream] should call it for
// every input before assigning offsets and refuse the whole append on the first error.
func PrepareEventInput(index int, in EventInput) (EventInput, []byte, error) {
	if strings.TrimSpace(in.Type) == "" {
		return in, nil, EmptyTypeError()
	}
	if !utf8.ValidString(in.Type) || !utf8.ValidString(in.IdempotencyKey) {
		return in, nil, NewError(CodeInvalidEvent, map[string]any{"index": index},
			"event %d has a type or idempotency key that is not valid UTF-8", index)
	}
	var err error
	if in.Payload, err = compactOptional(in.Payload); err != nil {
		return in, nil, NewError(CodeInvalidEvent, map[string]any{"index": index},
			"event %d has a payload that is not valid JSON: %v", index, err)
	}
	if in.Metadata, err = compactOptional(in.Metadata); err != nil {
		return in, nil, NewError(CodeInvalidEvent, map[string]any{"index": index},
			"event %d has metadata that is not valid JSON: %v", index, err)
	}
	// The stored body is the input's own JSON: its tags leave out the offset precondition.
	b, err := json.Marshal(in)
	if err != nil {
		return in, nil, NewError(CodeInvalidEvent, map[string]any{"index": index},
			"event %d cannot be encoded: %v", index, err)
	}
	if n := len(b) + createdAtOverhead; n > MaxEventBytes {
		return in, nil, NewError(CodeEventTooLarge,
			map[string]any{"index": index, "bytes": n, "maxBytes": MaxEventBytes},
			"event %d serializes to %d bytes, over the %d-byte ceiling of one event", index, n, MaxEventBytes)
	}
	return in, b, nil
}

// compactOptional returns raw compacted, or nil when it is absent (empty or null).
func compactOptional(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
