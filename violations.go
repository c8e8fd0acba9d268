package foldstream

import (
	"errors"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Violation is one way an event breaks its payload schema ([foldtype.Violation]).
type Violation = foldtype.Violation

// SchemaViolations returns every way err, an error of [PayloadSchema.Validate] or
// [Contract.Normalize], says a payload breaks its schema: one [Violation] per value that fails a
// rule, with Index 0 (the caller knows the event's place in its batch) and the value's JSON
// pointer within the event ("/payload/items/2/qty"). A payload that is not JSON, or does not
// decode into the payload's Go type, is one violation at "/payload". It returns nil for nil.
func SchemaViolations(err error) []Violation {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Pointer: "/payload", Message: violationText(err.Error())}}
	}
	var out []Violation
	seen := map[Violation]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			v := Violation{Pointer: "/payload" + e.InstanceLocation, Message: violationText(e.Message)}
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(out) == 0 {
		out = []Violation{{Pointer: "/payload", Message: "the payload does not match its schema"}}
	}
	return out
}

// violationText is a violation's message without the Go package names its decoder starts it
// with ("json: cannot unmarshal …").
func violationText(msg string) string {
	rest, notJSON := strings.CutPrefix(msg, "payload is not JSON: ")
	msg = strings.TrimPrefix(strings.TrimPrefix(rest, "jsonschema: "), "json: ")
	if notJSON {
		msg = "not JSON: " + msg
	}
	if msg == "" {
		return "the payload does not match its schema"
	}
	return msg
}
