package catalog

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// decodeEventReference is decodeEvent as it was before the one scan: encoding/json's Valid, then
// an exact-key decoding into raw fields.
func decodeEventReference(path string, e kernel.Message) (foldtype.Event, error) {
	body := bytes.TrimSpace(e.Body)
	if !json.Valid(body) {
		return foldtype.Event{}, Unreadable(e.Offset)
	}
	ev := foldtype.Event{Offset: e.Offset, Path: path}
	var b struct {
		Type           json.RawMessage `json:"type"`
		Payload        json.RawMessage `json:"payload"`
		Metadata       json.RawMessage `json:"metadata"`
		Source         json.RawMessage `json:"source"`
		IdempotencyKey json.RawMessage `json:"idempotencyKey"`
		CreatedAt      json.RawMessage `json:"createdAt"`
	}
	var typ string
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
		_ = json.Unmarshal(b.CreatedAt, &ev.CreatedAt)
	} else {
		ev.Type = MessageType
		ev.Payload = append(append([]byte(`{"value":`), body...), '}')
	}
	if ev.CreatedAt == "" {
		ev.CreatedAt = FormatCreatedAt(time.UnixMilli(e.CreatedMs))
	}
	return ev, nil
}

// compactRaw compacts raw JSON for comparison (nil stays nil).
func compactRaw(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// FuzzDecodeEvent checks the event view's decoding from the one scan against encoding/json's
// exact-key decoding: the same bodies are unreadable, and the others give the same event (raw
// values compared compact), whatever the keys' cases, escapes, duplicates and kinds.
func FuzzDecodeEvent(f *testing.F) {
	for _, seed := range []string{`{"type":"t","payload":{"a":1},"metadata":null,"idempotencyKey":"k","createdAt":"x"}`,
		`{"type":"t","TYPE":"u","Source":{"platform":true},"source":{"principal":{"actor":"a"}}}`, `{"t\u0079pe":"t","type":"s"}`,
		`{"type":"t","type":null}`, `{"type":5}`, `{"type":""}`, `[1,2]`, `"x"`, `{"type":"t","idempotencyKey":7,"createdAt":null}`,
		`{"type":"t","source":{"platform":true,"PLATFORM":false}}`, ` {"type" : "t" , "payload" : [ 1 , 2 ] } `, `{"type":"\ud800"}`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantErr := decodeEventReference("/p", kernel.Message{Offset: 3, CreatedMs: 1000, Body: body})
		got, err := DecodeEvent("/p", kernel.Message{Offset: 3, CreatedMs: 1000, Body: body})
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, reference %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if want.Type != MessageType {
			want.Payload, want.Metadata = compactRaw(want.Payload), compactRaw(want.Metadata)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", body, got, want)
		}
	})
}
