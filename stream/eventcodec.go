package stream

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// MessageType is the event type the event view gives a stored JSON message that is not
// event-shaped. Streams created over the Durable Streams protocol may hold any JSON values; the
// event view shows each one that is not an object with a string "type" as an event of this type
// whose payload is {"value": <the message>}, so engines can run over any JSON stream. An object with
// a string "type" is read as an event as it is.
const MessageType = "events.foldstream.dev/message"

// MaxEventBytes is the ceiling on one event's stored body: [foldtype.MaxEventBytes].
const MaxEventBytes = foldtype.MaxEventBytes

// createdAtLayout is the ISO-8601 layout of createdAt: UTC with milliseconds.
const createdAtLayout = "2006-01-02T15:04:05.000Z"

func formatCreatedAt(t time.Time) string { return t.UTC().Format(createdAtLayout) }

// storedBody is the JSON shape of a stored event body: the input without its offset precondition
// (docs/store.md#appending). createdAt is appended when the batch commits.
type storedBody struct {
	Type           string           `json:"type"`
	Payload        json.RawMessage  `json:"payload,omitempty"`
	Metadata       json.RawMessage  `json:"metadata,omitempty"`
	Source         *foldtype.Source `json:"source,omitempty"`
	IdempotencyKey string           `json:"idempotencyKey,omitempty"`
	Ephemeral      bool             `json:"ephemeral,omitempty"`
}

// preparedInput is an input checked and encoded outside the writer: everything except the parts
// that depend on the commit (offset, createdAt).
type preparedInput struct {
	in foldtype.EventInput
	// prefix is the body JSON without its closing brace; the writer appends createdAt.
	prefix []byte
}

// bodyOverhead is what `,"createdAt":"2006-01-02T15:04:05.000Z"}` adds to a prefix.
const bodyOverhead = len(`,"createdAt":""}`) + len(createdAtLayout)

// prepareInputs checks every input (docs/store.md#appending) and encodes its body. Payload and metadata
// must be valid JSON when present; an absent value ("" or null) is dropped.
func prepareInputs(inputs []foldtype.EventInput) ([]preparedInput, error) {
	out := make([]preparedInput, len(inputs))
	for i, in := range inputs {
		in, b, err := foldtype.PrepareEventInput(i, in) // the one check shared with the stand-ins
		if err != nil {
			return nil, err
		}
		out[i] = preparedInput{in: in, prefix: b[:len(b)-1]}
	}
	return out, nil
}

// finishBody completes a prepared body with its createdAt stamp.
func finishBody(prefix []byte, createdAt string) []byte {
	b := make([]byte, 0, len(prefix)+bodyOverhead)
	b = append(b, prefix...)
	b = append(b, `,"createdAt":"`...)
	b = append(b, createdAt...)
	b = append(b, `"}`...)
	return b
}

// eventBody is the lenient decoding shape of a stored body.
type eventBody struct {
	Type           json.RawMessage `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	Metadata       json.RawMessage `json:"metadata"`
	Source         json.RawMessage `json:"source"`
	IdempotencyKey json.RawMessage `json:"idempotencyKey"`
	CreatedAt      json.RawMessage `json:"createdAt"`
}

// decodeEvent turns a stored entry into an event at path.
//
//   - A JSON object whose "type" is a string is an event: its fields are read leniently (a field of
//     the wrong JSON type is dropped rather than failing the read), createdAt falls back to the
//     entry's commit time.
//   - Any other JSON value is a message: an event of type [MessageType] with payload
//     {"value": <the message>}.
//   - A body that is not JSON fails with EVENT_UNREADABLE and data {offset} (docs/store.md#reading).
func decodeEvent(path string, e message) (foldtype.Event, error) {
	body := bytes.TrimSpace(e.Body)
	if !json.Valid(body) {
		return foldtype.Event{}, unreadable(e.Offset)
	}
	ev := foldtype.Event{Offset: e.Offset, Path: path}
	var b eventBody
	var typ string
	// Fields are read by their exact names (rawjson.UnmarshalExact): encoding/json alone would read
	// "TYPE" or "Source" as the event's type or provenance.
	if len(body) > 0 && body[0] == '{' && rawjson.UnmarshalExact(body, &b) == nil && json.Unmarshal(b.Type, &typ) == nil && typ != "" {
		ev.Type = typ
		ev.Payload = nonNull(b.Payload)
		ev.Metadata = nonNull(b.Metadata)
		if len(nonNull(b.Source)) > 0 {
			var src foldtype.Source
			if rawjson.UnmarshalExact(b.Source, &src) == nil {
				ev.Source = &src
			}
		}
		_ = json.Unmarshal(b.IdempotencyKey, &ev.IdempotencyKey)
		// A stored entry is durable whatever its body says: an HTTP writer's message carrying
		// "ephemeral": true was stored, so processors must see (and re-reduce) it as durable.
		_ = json.Unmarshal(b.CreatedAt, &ev.CreatedAt)
	} else {
		ev.Type = MessageType
		p := make([]byte, 0, len(body)+10)
		p = append(p, `{"value":`...)
		p = append(p, body...)
		p = append(p, '}')
		ev.Payload = p
	}
	if ev.CreatedAt == "" {
		ev.CreatedAt = formatCreatedAt(time.UnixMilli(e.CreatedMs))
	}
	return ev, nil
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func unreadable(offset int64) *foldtype.Error {
	return foldtype.NewError(foldtype.CodeEventUnreadable, map[string]any{"offset": offset},
		"read: the event at offset %s is not JSON", strconv.FormatInt(offset, 10))
}

// eventBytes estimates an event's size for the ephemeral ring and pending budgets.
func eventBytes(ev foldtype.Event) int {
	return len(ev.Type) + len(ev.Payload) + len(ev.Metadata) + len(ev.IdempotencyKey) + len(ev.Path) + 64
}
