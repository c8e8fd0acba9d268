package stream

import (
	"encoding/json"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/feeds"
)

// The event face's encoding of the events it appends; the decoding both faces read stored
// messages with is package catalog's (eventcodec.go there).

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

// eventBytes estimates an event's size for the ephemeral ring and pending budgets.
var eventBytes = feeds.EventBytes
