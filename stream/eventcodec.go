package stream

import (
	"bytes"
	"encoding/json"
	"github.com/foldstream/foldstream/stream/internal/kernel"
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

// msgKeys are the members of a stored message that the store reads, found by the one scan of a
// body (rawjson.Split, rawjson.ScanValue), by their exact names as the event view reads them;
// "source" is found in any case too, for the writer rules of a protocol append (Provenance).
var msgKeys = rawjson.NewKeys("source", "type", "idempotencyKey", "payload", "metadata", "source", "createdAt", "ephemeral")

// The indexes of msgKeys' names.
const (
	mType = iota
	mKey
	mPayload
	mMetadata
	mSource
	mCreatedAt
	mEphemeral
)

// decodeEvent turns a stored entry into an event at path.
//
//   - A JSON object whose "type" is a string is an event: its fields are read leniently (a field of
//     the wrong JSON type is dropped rather than failing the read), createdAt falls back to the
//     entry's commit time.
//   - Any other JSON value is a message: an event of type [MessageType] with payload
//     {"value": <the message>}.
//   - A body that is not JSON fails with EVENT_UNREADABLE and data {offset} (docs/store.md#reading).
func decodeEvent(path string, e kernel.Message) (foldtype.Event, error) {
	body := bytes.TrimSpace(e.Body)
	m, err := rawjson.ScanValue(body, msgKeys)
	if err != nil {
		return foldtype.Event{}, unreadable(e.Offset)
	}
	return eventOf(path, e.Offset, e.CreatedMs, &m, body), nil
}

// eventOf is the event a scanned message m (whose text is body) is at offset, committed at
// createdMs: decodeEvent without the scan. Fields are read by their exact names, as the scan
// found them: encoding/json alone would read "TYPE" or "Source" as the event's type or
// provenance. The event holds copies, never the body's bytes.
func eventOf(path string, offset, createdMs int64, m *rawjson.Message, body []byte) foldtype.Event {
	ev := foldtype.Event{Offset: offset, Path: path}
	typ, _ := m.Member(mType).String()
	if m.Raw[0] == '{' && typ != "" {
		own := m.Own()
		ev.Type = typ
		ev.Payload = nonNull(own.Member(mPayload).Value)
		ev.Metadata = nonNull(own.Member(mMetadata).Value)
		if src := nonNull(own.Member(mSource).Value); len(src) > 0 {
			var s foldtype.Source
			if rawjson.UnmarshalExact(src, &s) == nil {
				ev.Source = &s
			}
		}
		ev.IdempotencyKey, _ = own.Member(mKey).String()
		// A stored entry is durable whatever its body says: an HTTP writer's message carrying
		// "ephemeral": true was stored, so processors must see (and re-reduce) it as durable.
		ev.CreatedAt, _ = own.Member(mCreatedAt).String()
	} else {
		ev.Type = MessageType
		p := make([]byte, 0, len(body)+10)
		p = append(p, `{"value":`...)
		p = append(p, body...)
		p = append(p, '}')
		ev.Payload = p
	}
	if ev.CreatedAt == "" {
		ev.CreatedAt = formatCreatedAt(time.UnixMilli(createdMs))
	}
	return ev
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
