package protocol

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// eventKeyOfReference and controlOfMessageReference are the probes as they were before the one
// scan: exact-key decodings into typed fields.
func eventKeyOfReference(msg []byte) (foldtype.EventInput, string) {
	if len(msg) == 0 || msg[0] != '{' {
		return foldtype.EventInput{}, ""
	}
	var probe struct {
		Type           *string         `json:"type"`
		IdempotencyKey *string         `json:"idempotencyKey"`
		Payload        json.RawMessage `json:"payload"`
		Metadata       json.RawMessage `json:"metadata"`
	}
	if rawjson.UnmarshalExact(msg, &probe) != nil || probe.Type == nil || probe.IdempotencyKey == nil || *probe.IdempotencyKey == "" {
		return foldtype.EventInput{}, ""
	}
	return foldtype.EventInput{Type: *probe.Type, Payload: probe.Payload, Metadata: probe.Metadata}, *probe.IdempotencyKey
}

func controlOfMessageReference(msg []byte) (foldtype.ControlKind, string) {
	if len(msg) == 0 || msg[0] != '{' {
		return foldtype.ControlNone, ""
	}
	var probe struct {
		Type      *string         `json:"type"`
		Payload   json.RawMessage `json:"payload"`
		Ephemeral bool            `json:"ephemeral"`
	}
	if rawjson.UnmarshalExact(msg, &probe) != nil || probe.Type == nil {
		return foldtype.ControlNone, ""
	}
	return foldtype.ParseControl(*probe.Type, probe.Payload, false)
}

// FuzzMessageProbes checks the idempotency-key and control probes, read from the one scan,
// against exact-key decodings into typed fields.
func FuzzMessageProbes(f *testing.F) {
	for _, seed := range []string{`{"type":"t","idempotencyKey":"k","payload":{"a":1}}`, `{"type":"t","idempotencyKey":""}`,
		`{"type":5,"idempotencyKey":"k"}`, `{"type":"t","idempotencyKey":"k","idempotencyKey":null}`, `{"type":"t","idempotency\u004bey":"k"}`,
		`{"type":"t","idempotencyKey":"k","IDEMPOTENCYKEY":1}`, `{"type":"t","type":4,"idempotencyKey":"k"}`,
		`{"type":"events.iterate.com/stream/paused","payload":{"reason":"r"}}`, `{"type":"events.iterate.com/stream/resumed","ephemeral":"x"}`,
		`{"type":"events.iterate.com\/stream/paused","payload":5}`, `{"type":"events.iterate.com/stream/paused","ephemeral":null,"ephemeral":true}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := splitJSON(body, true, nil)
		if err != nil {
			return
		}
		for i := range msgs {
			raw := msgs[i].Raw
			wantIn, wantKey := eventKeyOfReference(raw)
			gotIn, gotKey := eventKeyOf(&msgs[i])
			if gotKey != wantKey || !reflect.DeepEqual(gotIn, wantIn) {
				t.Fatalf("%s: key %q %+v, reference %q %+v", raw, gotKey, gotIn, wantKey, wantIn)
			}
			wantCtl, wantReason := controlOfMessageReference(raw)
			gotCtl, gotReason := controlOfMessage(&msgs[i])
			if gotCtl != wantCtl || gotReason != wantReason {
				t.Fatalf("%s: control %v %q, reference %v %q", raw, gotCtl, gotReason, wantCtl, wantReason)
			}
		}
	})
}
