package catalog

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// MessageType is the event type the event view gives a stored JSON message that is not
// event-shaped. Streams created over the Durable Streams protocol may hold any JSON values; the
// event view shows each one that is not an object with a string "type" as an event of this type
// whose payload is {"value": <the message>}, so engines can run over any JSON stream. An object with
// a string "type" is read as an event as it is.
const MessageType = "events.foldstream.dev/message"

// MaxEventBytes is the ceiling on one event's stored body: [foldtype.MaxEventBytes].
const MaxEventBytes = foldtype.MaxEventBytes

// CreatedAtLayout is the ISO-8601 layout of createdAt: UTC with milliseconds.
const CreatedAtLayout = "2006-01-02T15:04:05.000Z"

// FormatCreatedAt formats a commit time as an event's createdAt.
func FormatCreatedAt(t time.Time) string { return t.UTC().Format(CreatedAtLayout) }

// MsgKeys are the members of a stored message that the store reads, found by the one scan of a
// body (rawjson.Split, rawjson.ScanValue), by their exact names as the event view reads them;
// "source" is found in any case too, for the writer rules of a protocol append (Provenance).
var MsgKeys = rawjson.NewKeys("source", "type", "idempotencyKey", "payload", "metadata", "source", "createdAt", "ephemeral")

// The indexes of MsgKeys' names.
const (
	MType      = iota // "type"
	MKey              // "idempotencyKey"
	MPayload          // "payload"
	MMetadata         // "metadata"
	MSource           // "source", by its exact name
	MCreatedAt        // "createdAt"
	MEphemeral        // "ephemeral"
)

// DecodeEvent turns a stored entry into an event at path.
//
//   - A JSON object whose "type" is a string is an event: its fields are read leniently (a field of
//     the wrong JSON type is dropped rather than failing the read), createdAt falls back to the
//     entry's commit time.
//   - Any other JSON value is a message: an event of type [MessageType] with payload
//     {"value": <the message>}.
//   - A body that is not JSON fails with EVENT_UNREADABLE and data {offset} (docs/store.md#reading).
func DecodeEvent(path string, e kernel.Message) (foldtype.Event, error) {
	body := bytes.TrimSpace(e.Body)
	m, err := rawjson.ScanValue(body, MsgKeys)
	if err != nil {
		return foldtype.Event{}, Unreadable(e.Offset)
	}
	return EventOf(path, e.Offset, e.CreatedMs, &m, body), nil
}

// EventOf is the event a scanned message m (whose text is body) is at offset, committed at
// createdMs: DecodeEvent without the scan. Fields are read by their exact names, as the scan
// found them: encoding/json alone would read "TYPE" or "Source" as the event's type or
// provenance. The event holds copies, never the body's bytes.
func EventOf(path string, offset, createdMs int64, m *rawjson.Message, body []byte) foldtype.Event {
	ev := foldtype.Event{Offset: offset, Path: path}
	typ, _ := m.Member(MType).String()
	if m.Raw[0] == '{' && typ != "" {
		own := m.Own()
		ev.Type = typ
		ev.Payload = nonNull(own.Member(MPayload).Value)
		ev.Metadata = nonNull(own.Member(MMetadata).Value)
		if src := nonNull(own.Member(MSource).Value); len(src) > 0 {
			var s foldtype.Source
			if rawjson.UnmarshalExact(src, &s) == nil {
				ev.Source = &s
			}
		}
		ev.IdempotencyKey, _ = own.Member(MKey).String()
		// A stored entry is durable whatever its body says: an HTTP writer's message carrying
		// "ephemeral": true was stored, so processors must see (and re-reduce) it as durable.
		ev.CreatedAt, _ = own.Member(MCreatedAt).String()
	} else {
		ev.Type = MessageType
		p := make([]byte, 0, len(body)+10)
		p = append(p, `{"value":`...)
		p = append(p, body...)
		p = append(p, '}')
		ev.Payload = p
	}
	if ev.CreatedAt == "" {
		ev.CreatedAt = FormatCreatedAt(time.UnixMilli(createdMs))
	}
	return ev
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// Unreadable is the EVENT_UNREADABLE refusal of a stored entry at offset that is not JSON.
func Unreadable(offset int64) *foldtype.Error {
	return foldtype.NewError(foldtype.CodeEventUnreadable, map[string]any{"offset": offset},
		"read: the event at offset %s is not JSON", strconv.FormatInt(offset, 10))
}
