package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// This file vets the messages of a JSON-mode write before the store sees them
// (docs/server.md#provenance): valid UTF-8, no idempotency key from the namespace reserved for
// processors, and a source that only the server sets.

// vetJSON checks and rewrites the body of a JSON-mode write. In every event-shaped message (an
// object whose "type" is a non-empty string — the messages processors see as events) a
// client-supplied "source" is dropped, and the source {"principal": {"actor": …}} of the
// authorized principal is set when there is one. It returns the body to store, or a coded
// refusal.
func vetJSON(body []byte, principal *foldtype.Principal, reservedPrefix string) ([]byte, *foldtype.Error) {
	if !utf8.Valid(body) {
		return nil, foldtype.NewError(foldtype.CodeBadRequest, nil, "the body is not valid UTF-8 (JSON text must be)")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return body, nil
	}
	// Fast path: without a principal to stamp, a body that cannot name a source key (no "ource"
	// in any case, no escape) nor a reserved key is stored as sent. Key matching follows
	// encoding/json: case-insensitive, escapes decoded.
	if principal == nil && bytes.IndexByte(trimmed, '\\') < 0 && !containsFoldASCII(trimmed, "ource") &&
		(reservedPrefix == "" || !bytes.Contains(trimmed, []byte(reservedPrefix))) {
		return body, nil
	}
	var stamp []byte
	if principal != nil {
		var err error
		stamp, err = json.Marshal(foldtype.Source{Principal: principal})
		if err != nil {
			return nil, foldtype.NewError(foldtype.CodeBadRequest, nil, "the principal cannot be stamped: %v", err)
		}
	}
	if trimmed[0] != '[' {
		msg, ferr := vetMessage(trimmed, stamp, reservedPrefix, -1)
		if ferr != nil {
			return nil, ferr
		}
		return msg, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(trimmed, &elems); err != nil {
		return nil, invalidJSON()
	}
	out := make([]byte, 0, len(trimmed)+len(elems)*len(stamp))
	out = append(out, '[')
	for i, e := range elems {
		msg, ferr := vetMessage(e, stamp, reservedPrefix, i)
		if ferr != nil {
			return nil, ferr
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, msg...)
	}
	return append(out, ']'), nil
}

func invalidJSON() *foldtype.Error {
	return foldtype.NewError(foldtype.CodeBadRequest, nil, "invalid JSON body")
}

// eventFields are the fields of a message that decide how the server treats it, decoded the way
// the store decodes events (same tags, exact key names: rawjson.UnmarshalExact, last duplicate
// wins).
type eventFields struct {
	Type           json.RawMessage `json:"type"`
	IdempotencyKey json.RawMessage `json:"idempotencyKey"`
}

// vetMessage vets one message (index i of a batch, -1 for a single one).
func vetMessage(msg json.RawMessage, stamp []byte, reservedPrefix string, i int) ([]byte, *foldtype.Error) {
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 || msg[0] != '{' {
		if !json.Valid(msg) {
			return nil, invalidJSON()
		}
		return msg, nil // not an event: stored as a message, never carries a source
	}
	var f eventFields
	if err := rawjson.UnmarshalExact(msg, &f); err != nil {
		return nil, invalidJSON()
	}
	var typ string
	if json.Unmarshal(f.Type, &typ) != nil || typ == "" {
		return msg, nil // not event-shaped: processors see it as a plain message
	}
	var key string
	if json.Unmarshal(f.IdempotencyKey, &key) == nil && reservedPrefix != "" && strings.HasPrefix(key, reservedPrefix) {
		data := map[string]any{"prefix": reservedPrefix}
		where := ""
		if i >= 0 {
			data["index"] = i
			where = " (message " + itoa(int64(i)) + ")"
		}
		return nil, foldtype.NewError(foldtype.CodeReservedKey, data,
			"idempotency key %q%s starts with %q, which is reserved for processors' own events", key, where, reservedPrefix)
	}
	return rewriteSource(msg, stamp)
}

// rewriteSource returns the object msg without any member whose key is "source" in any letter
// case (a superset of the store's exact match), plus "source": stamp when stamp is set. Members
// keep their order and raw values.
func rewriteSource(msg []byte, stamp []byte) ([]byte, *foldtype.Error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, invalidJSON()
	}
	out := make([]byte, 0, len(msg)+len(stamp)+10)
	out = append(out, '{')
	n := 0
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, invalidJSON()
		}
		key, ok := t.(string)
		if !ok {
			return nil, invalidJSON()
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, invalidJSON()
		}
		if strings.EqualFold(key, "source") {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(key)
		out = append(out, kb...)
		out = append(out, ':')
		out = append(out, v...)
		n++
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, invalidJSON()
	}
	if dec.More() {
		return nil, invalidJSON()
	}
	if stamp != nil {
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, `"source":`...)
		out = append(out, stamp...)
	}
	return append(out, '}'), nil
}

// containsFoldASCII reports whether b contains lower (ASCII lower-case letters) in any case.
func containsFoldASCII(b []byte, lower string) bool {
	n := len(lower)
	for i := 0; i+n <= len(b); i++ {
		j := 0
		for ; j < n; j++ {
			if b[i+j]|0x20 != lower[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}
