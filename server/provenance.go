package server

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// This file sets the rules for the messages of a JSON-mode write (docs/server.md#provenance):
// valid UTF-8, no idempotency key from the namespace reserved for processors, and a source that
// only the server sets. The server checks the UTF-8 itself; the other two rules go to the store
// as a stream.Provenance and are applied by the one scan that splits the body, so a body is
// parsed once, authenticated or not.

// provenanceOf checks the body of a JSON-mode write and returns the rules the store applies to
// its messages: in every event-shaped message (an object whose "type" is a non-empty string — the
// messages processors see as events) a client-supplied "source" is dropped, and the source
// {"principal": {"actor": …}} of the authorized principal is set when there is one; an
// idempotency key with the reserved prefix refuses the write. It returns a coded refusal for a
// body that is not UTF-8.
func provenanceOf(body []byte, principal *foldtype.Principal, reservedPrefix string) (*stream.Provenance, *foldtype.Error) {
	if !utf8.Valid(body) {
		return nil, foldtype.NewError(foldtype.CodeBadRequest, nil, "the body is not valid UTF-8 (JSON text must be)")
	}
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
