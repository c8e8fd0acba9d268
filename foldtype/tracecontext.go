package foldtype

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/foldstream/foldstream/internal/rawjson"
)

// The metadata members that carry an event's W3C trace context (docs/engine.md#tracing): the
// server writes the append's span into an event that names none, the engine the span of the
// ProcessEvent call or blocker that emitted it, and a ProcessEvent span continues the trace they
// name. They say who handled an event, not what the event is, so [SameIdempotentEvent] does not
// compare them.
const (
	MetadataTraceParent = "traceparent"
	MetadataTraceState  = "tracestate"
)

// WithTraceContext returns metadata with traceparent (and tracestate when not empty) added, or
// metadata unchanged when it already names a traceparent, is not a JSON object, or traceparent is
// empty. Absent metadata becomes an object holding the trace context alone. The members are put
// first, so the rest of the object keeps its bytes.
func WithTraceContext(metadata json.RawMessage, traceparent, tracestate string) json.RawMessage {
	if traceparent == "" {
		return metadata
	}
	body := []byte("}")
	if !rawjson.IsAbsent(metadata) {
		m := bytes.TrimSpace(metadata)
		if len(m) < 2 || m[0] != '{' || hasTraceParent(m) {
			return metadata
		}
		body = m[1:]
		if inner := bytes.TrimSpace(m[1 : len(m)-1]); len(inner) > 0 {
			body = append([]byte{','}, m[1:]...)
		}
	}
	out := make([]byte, 0, len(body)+len(traceparent)+len(tracestate)+32)
	out = append(out, `{"traceparent":`...)
	out = strconv.AppendQuote(out, traceparent)
	if tracestate != "" {
		out = append(out, `,"tracestate":`...)
		out = strconv.AppendQuote(out, tracestate)
	}
	return append(out, body...)
}

// hasTraceParent reports whether the metadata object m has a traceparent member.
func hasTraceParent(m []byte) bool {
	if !bytes.Contains(m, []byte(`"traceparent"`)) {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(m, &members) != nil {
		return false
	}
	_, ok := members[MetadataTraceParent]
	return ok
}

// withoutTraceContext returns the members of a metadata object other than the trace context, and
// ok true, when metadata is an object holding a trace-context member; otherwise ok is false and
// the metadata compares as it is.
func withoutTraceContext(metadata json.RawMessage) (rest map[string]json.RawMessage, ok bool) {
	if !bytes.Contains(metadata, []byte(`"trace`)) {
		return nil, false // the common case: no trace context, and no parse
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(metadata, &members) != nil {
		return nil, false
	}
	_, p := members[MetadataTraceParent]
	_, s := members[MetadataTraceState]
	if !p && !s {
		return nil, false
	}
	delete(members, MetadataTraceParent)
	delete(members, MetadataTraceState)
	return members, true
}

// metadataEqual compares two events' metadata as [SameIdempotentEvent] does: deep-equal with
// the trace-context members left out. When either side holds trace context, an object with no
// other member and absent metadata are the same (without, absent and {} differ, as P-49 says).
func metadataEqual(a, b json.RawMessage) bool {
	ra, aTraced := withoutTraceContext(a)
	rb, bTraced := withoutTraceContext(b)
	if !aTraced && !bTraced {
		return rawJSONEqual(a, b)
	}
	if !aTraced {
		ra, aTraced = membersOf(a)
		if !aTraced {
			return false // not an object (or absent) against an object with trace context
		}
	}
	if !bTraced {
		rb, bTraced = membersOf(b)
		if !bTraced {
			return false
		}
	}
	// With trace context on either side, metadata left with no members and absent metadata are
	// the same: a retry's emission may have been made with tracing on where the first was not.
	if len(ra) != len(rb) {
		return false
	}
	for k, va := range ra {
		vb, ok := rb[k]
		if !ok || !rawJSONEqual(va, vb) {
			return false
		}
	}
	return true
}

// membersOf returns the members of metadata without trace context: nil and ok for absent
// metadata, the members and ok for an object, ok false otherwise.
func membersOf(metadata json.RawMessage) (map[string]json.RawMessage, bool) {
	if rawjson.IsAbsent(metadata) {
		return nil, true
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(metadata, &members) != nil || members == nil {
		return nil, false
	}
	return members, true
}
