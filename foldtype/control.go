package foldtype

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Control events pause and resume a stream (docs/engine.md#pausing-a-stream). They are ordinary
// events in the log; the stream folds them into its pause state when they land, in the same
// transaction, and judges every later batch by that state.
const (
	// TypeStreamPaused pauses the stream. Its payload is absent or an object whose optional
	// "reason" is a string; the reason is what refused appends are told.
	TypeStreamPaused = "events.iterate.com/stream/paused"
	// TypeStreamResumed resumes a paused stream. Its payload is absent or an object.
	TypeStreamResumed = "events.iterate.com/stream/resumed"
)

// NoPauseReason is the reason of a pause that gave none.
const NoPauseReason = "no reason given"

// ControlKind says what a control event does.
type ControlKind int

// The kinds of [ParseControl].
const (
	// ControlNone: not a control event (any other type).
	ControlNone ControlKind = iota
	// ControlMalformed: a control type whose payload is malformed, or an ephemeral one. It is
	// admitted on a paused stream and lands, but it configures nothing.
	ControlMalformed
	// ControlPause: a well-formed pause.
	ControlPause
	// ControlResume: a well-formed resume.
	ControlResume
)

// IsControlType reports whether typ is one of the stream's control event types.
func IsControlType(typ string) bool {
	return typ == TypeStreamPaused || typ == TypeStreamResumed
}

// ParseControl classifies an event as a control event and returns, for a well-formed pause, its
// reason ([NoPauseReason] when it gave none). A control type with a payload that is neither
// absent, null nor a JSON object, a pause whose "reason" is not a string, and any ephemeral
// control event (never stored, so it cannot configure a durable state) are [ControlMalformed].
func ParseControl(typ string, payload json.RawMessage, ephemeral bool) (ControlKind, string) {
	if !IsControlType(typ) {
		return ControlNone, ""
	}
	if ephemeral {
		return ControlMalformed, ""
	}
	p := bytes.TrimSpace(payload)
	var obj map[string]json.RawMessage
	if len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' || json.Unmarshal(p, &obj) != nil {
			return ControlMalformed, ""
		}
	}
	if typ == TypeStreamResumed {
		return ControlResume, ""
	}
	reason := NoPauseReason
	if raw, ok := obj["reason"]; ok {
		var r string
		if json.Unmarshal(raw, &r) != nil {
			return ControlMalformed, ""
		}
		if r = strings.TrimSpace(r); r != "" {
			reason = r
		}
	}
	return ControlPause, reason
}

// FoldPause returns the pause state after a committed event: paused and its reason. Events other
// than well-formed control events leave the state as it was.
func FoldPause(paused bool, reason string, typ string, payload json.RawMessage, ephemeral bool) (bool, string) {
	switch kind, r := ParseControl(typ, payload, ephemeral); kind {
	case ControlPause:
		return true, r
	case ControlResume:
		return false, ""
	}
	return paused, reason
}

// StreamPausedError builds the STREAM_PAUSED refusal of an append to a paused stream
// (docs/engine.md#pausing-a-stream), for the store, the test stand-ins and custom [Stream]
// implementations. Data holds the reason under "reason".
func StreamPausedError(reason string) *Error {
	return NewError(CodeStreamPaused, map[string]any{"reason": reason}, "stream paused: %s", reason)
}
