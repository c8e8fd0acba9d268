package server

import (
	"encoding/json"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// This file sets the rules for the messages of a JSON-mode write (docs/server.md#provenance):
// valid UTF-8, no idempotency key from the namespace reserved for processors, and a source that
// only the server sets. All three go to the store as a stream.Provenance, applied by the one scan
// that splits the body, so a body is parsed once, authenticated or not; the store applies them
// wherever the stream's messages are JSON, which the server cannot tell from a fork request that
// names no content type.

// provenanceOf returns the rules the store applies to the messages of a write whose stream is
// JSON (docs/server.md#provenance), whatever content type the request named:
// in every event-shaped message (an object whose "type" is a non-empty string — the
// messages processors see as events) a client-supplied "source" is dropped, and the source
// {"principal": {"actor": …}} of the authorized principal is set when there is one; an
// idempotency key with the reserved prefix refuses the write, and so does a body that is not
// UTF-8.
func provenanceOf(principal *foldtype.Principal, reservedPrefix string) (*stream.Provenance, *foldtype.Error) {
	p := &stream.Provenance{ReservedKeyPrefix: reservedPrefix}
	if principal != nil {
		stamp, err := json.Marshal(foldtype.Source{Principal: principal})
		if err != nil {
			return nil, foldtype.NewError(foldtype.CodeBadRequest, nil, "the principal cannot be stamped: %v", err)
		}
		p.Source = stamp
	}
	return p, nil
}
