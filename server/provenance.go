package server

import (
	"encoding/json"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// This file sets the rules for the messages of a JSON-mode write (docs/server.md#provenance):
// valid UTF-8, no idempotency key from the namespace reserved for processors, and a source that
// only the server sets. All three go to the store as a stream.Provenance, applied by the one scan
// that splits the body, so a body is parsed once, authenticated or not; the store applies them
// wherever the stream's messages are JSON, which the server cannot tell from a fork request that
// names no content type.

// anonymousProvenance is the rules of a write with no principal: no source is set.
var anonymousProvenance = &stream.Provenance{ReservedKeyPrefix: reservedKeyPrefix}

// maxCachedStamps bounds the provenance cache: an Authorize that mints a principal per request
// (one per user of a large tenant) costs a marshal per request past it, never unbounded memory.
const maxCachedStamps = 4096

// stamps caches each principal's provenance, so a write marshals its principal's source once per
// principal, not once per request. A Provenance is never modified once made: every request of
// the principal shares it.
type stamps struct {
	mu sync.Mutex
	by map[foldtype.Principal]*stream.Provenance
}

// provenanceOf returns the rules the store applies to the messages of a write whose stream is
// JSON (docs/server.md#provenance), whatever content type the request named:
// in every event-shaped message (an object whose "type" is a non-empty string — the
// messages processors see as events) a client-supplied "source" is dropped, and the source
// {"principal": {"actor": …}} of the authorized principal is set when there is one; an
// idempotency key with the reserved prefix refuses the write, and so does a body that is not
// UTF-8.
func (c *stamps) provenanceOf(principal *foldtype.Principal) *stream.Provenance {
	if principal == nil {
		return anonymousProvenance
	}
	c.mu.Lock()
	p := c.by[*principal]
	c.mu.Unlock()
	if p != nil {
		return p
	}
	stamp, _ := json.Marshal(foldtype.Source{Principal: principal}) // strings only: cannot fail
	p = &stream.Provenance{Source: stamp, ReservedKeyPrefix: reservedKeyPrefix}
	c.mu.Lock()
	if c.by == nil {
		c.by = map[foldtype.Principal]*stream.Provenance{}
	}
	if len(c.by) < maxCachedStamps {
		c.by[*principal] = p
	}
	c.mu.Unlock()
	return p
}
