package foldtype

import (
	"context"
	"encoding/json"
	"time"
)

// EventInput is what a writer hands to [Stream.Append] (docs/engine.md#events).
//
// Payload and Metadata are raw JSON objects; nil means absent, which is different from an empty
// object "{}" (docs/engine.md#idempotency). Use [JSON] to build them from Go values.
type EventInput struct {
	// Type is required: a non-empty string (after trimming spaces).
	Type string `json:"type"`
	// Payload is an optional JSON object.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Metadata is an optional JSON object.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Source is optional provenance (docs/engine.md#events).
	Source *Source `json:"source,omitempty"`
	// IdempotencyKey, when set, makes the append idempotent per stream
	// (docs/engine.md#idempotency).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Offset is a precondition: when non-zero the event must land at exactly this offset or the
	// whole batch is refused with [CodeOffsetConflict] (docs/engine.md#the-offset-precondition).
	// It is never stored.
	Offset int64 `json:"-"`
	// Ephemeral events take an offset but are never persisted; they are delivered by pushes only.
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// Event is a committed event: the input without its offset precondition, plus the identity the
// stream assigned at commit (docs/engine.md#events).
type Event struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Source         *Source         `json:"source,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Ephemeral      bool            `json:"ephemeral,omitempty"`
	// Offset is the event's position in the stream's offset sequence (1-based).
	Offset int64 `json:"offset"`
	// CreatedAt is the commit time as an RFC 3339 / ISO-8601 timestamp with milliseconds.
	CreatedAt string `json:"createdAt"`
	// Path is the stream's own path.
	Path string `json:"path"`
}

// Input returns the event as an input (without an offset precondition).
func (e Event) Input() EventInput {
	return EventInput{
		Type:           e.Type,
		Payload:        e.Payload,
		Metadata:       e.Metadata,
		Source:         e.Source,
		IdempotencyKey: e.IdempotencyKey,
		Ephemeral:      e.Ephemeral,
	}
}

// Source is an event's provenance (docs/engine.md#events).
type Source struct {
	Schedule  *ScheduleSource  `json:"schedule,omitempty"`
	Processor *ProcessorSource `json:"processor,omitempty"`
	Principal *Principal       `json:"principal,omitempty"`
	Grant     string           `json:"grant,omitempty"`
	// Platform is only ever true: the platform vouches for the event.
	Platform bool `json:"platform,omitempty"`
	// Origin is the path of the stream the event was appended to (docs/engine.md#cause-chains):
	// the stream stamps it when a source is present without one.
	Origin string `json:"origin,omitempty"`
	// Cause places a processor's emit in its cause chain; the engine stamps it.
	Cause *Cause `json:"cause,omitempty"`
}

// Cause is an emitted event's place in its cause chain (docs/engine.md#cause-chains): the chain is
// named after the event that started it ("<path>@<offset>"), and depth counts the emits between
// that event and this one (1 for a direct reaction to it).
type Cause struct {
	Chain string `json:"chain"`
	Depth int    `json:"depth"`
}

// ScheduleSource says a schedule produced the event.
type ScheduleSource struct {
	Key               string  `json:"key"`
	ScheduledAtOffset int64   `json:"scheduledAtOffset"`
	At                string  `json:"at"`
	DefinedBy         *Source `json:"definedBy,omitempty"`
}

// ProcessorSource is stamped by the engine on every event a processor emits
// (docs/engine.md#emitting-events).
type ProcessorSource struct {
	Slug            string           `json:"slug"`
	Version         string           `json:"version"`
	WhileProcessing *WhileProcessing `json:"whileProcessing,omitempty"`
}

// WhileProcessing names the event a processor was handling when it emitted.
type WhileProcessing struct {
	Offset int64  `json:"offset"`
	Type   string `json:"type"`
}

// Principal is the actor on whose behalf an event was written.
type Principal struct {
	Actor string `json:"actor"`
	Email string `json:"email,omitempty"`
}

// ScannedRange is the half-open offset window (After, Through] that a delivery proves contiguous.
type ScannedRange struct {
	After   int64 `json:"after"`
	Through int64 `json:"through"`
}

// ReadPage is one page of a log read (docs/engine.md#streams).
type ReadPage struct {
	// Events are durable events with offset > after, in offset order.
	Events []Event `json:"events"`
	// ScannedThroughOffset is how far the log is contiguously known; never less than after.
	ScannedThroughOffset int64 `json:"scannedThroughOffset"`
	// AtHead says whether the page reached the head of the log. Page length proves nothing.
	AtHead bool `json:"atHead"`
}

// Stream is what an engine needs from the stream it runs against (docs/engine.md#streams). The
// durable store in package stream implements it per path; package testsupport has an in-memory
// stand-in.
type Stream interface {
	// Append commits events atomically and returns them in input order. Pushes caused by the append
	// to engines must be fire-and-forget, so a processor appending inside its own batch cannot
	// deadlock (docs/engine.md#streams).
	Append(ctx context.Context, events ...EventInput) ([]Event, error)
	// Read returns durable events with offset > after, at most limit of them.
	Read(ctx context.Context, after int64, limit int) (ReadPage, error)
	// Claim asks the host to revive the engine by at; the zero time releases the claim.
	Claim(ctx context.Context, at time.Time) error
}

// JSON marshals v for use as a payload or metadata. It panics if v cannot be marshalled, which is a
// programming error for the literal maps and structs it is meant for; use json.Marshal to handle
// errors.
func JSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("foldtype.JSON: " + err.Error())
	}
	return b
}
