package foldstream

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Callers classify errors by code (with errors.Is
// against the sentinels below, or errors.As to *Error), never by message text.
type Code string

// Error codes. The spec's codes (§14.1) come first; the rest give a code to errors the spec leaves
// uncoded, so every error a user can cause is classifiable.
const (
	CodeIdempotencyConflict      Code = "IDEMPOTENCY_CONFLICT"
	CodeOffsetConflict           Code = "OFFSET_CONFLICT"
	CodeReduceCheckpointTooLarge Code = "REDUCE_CHECKPOINT_TOO_LARGE"
	CodeEventTooLarge            Code = "EVENT_TOO_LARGE"
	CodeEventUnreadable          Code = "EVENT_UNREADABLE"
	CodeStreamPaused             Code = "STREAM_PAUSED"
	CodeWaitTimeout              Code = "WAIT_TIMEOUT"

	// CodeInvalidEvent: an appended event is malformed (for example an empty type).
	CodeInvalidEvent Code = "INVALID_EVENT"
	// CodeUndeclaredEmit: a processor appended a type missing from its contract's emits.
	CodeUndeclaredEmit Code = "UNDECLARED_EMIT"
	// CodeProcessTimeout: WaitUntilProcessed did not see the offset in time.
	CodeProcessTimeout Code = "PROCESS_TIMEOUT"
	// CodeInvalidContract: a contract definition was refused.
	CodeInvalidContract Code = "INVALID_CONTRACT"
	// CodeClosed: the engine, stream or store was closed.
	CodeClosed Code = "CLOSED"
)

// Error is a coded error carrying the data a caller needs beside a human message.
type Error struct {
	// Code classifies the error.
	Code Code
	// Message is the human-readable text (the spec's exact wording where it has one).
	Message string
	// Data holds machine-readable details, e.g. {"existingOffset": 3}.
	Data map[string]any
	// Retryable is false for errors that retrying cannot fix (spec §5.3 latch).
	Retryable bool
	// Err is an optional cause.
	Err error
}

// Error returns the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a sentinel *Error (no message) with the same code, so that
// errors.Is(err, foldstream.ErrOffsetConflict) works for every error carrying that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// NewError builds a coded error with a formatted message.
func NewError(code Code, data map[string]any, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data, Retryable: true}
}

// Sentinels for errors.Is. They carry only a code.
var (
	ErrIdempotencyConflict      = &Error{Code: CodeIdempotencyConflict}
	ErrOffsetConflict           = &Error{Code: CodeOffsetConflict}
	ErrReduceCheckpointTooLarge = &Error{Code: CodeReduceCheckpointTooLarge}
	ErrEventTooLarge            = &Error{Code: CodeEventTooLarge}
	ErrEventUnreadable          = &Error{Code: CodeEventUnreadable}
	ErrStreamPaused             = &Error{Code: CodeStreamPaused}
	ErrWaitTimeout              = &Error{Code: CodeWaitTimeout}
	ErrInvalidEvent             = &Error{Code: CodeInvalidEvent}
	ErrUndeclaredEmit           = &Error{Code: CodeUndeclaredEmit}
	ErrProcessTimeout           = &Error{Code: CodeProcessTimeout}
	ErrInvalidContract          = &Error{Code: CodeInvalidContract}
	ErrClosed                   = &Error{Code: CodeClosed}
)

// CodeOf returns the code of the first *Error in err's chain, or "" when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsRetryable reports whether err may succeed when retried: false only for an *Error marked not
// retryable.
func IsRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retryable
	}
	return true
}

// IdempotencyConflictError builds the spec's IDEMPOTENCY_CONFLICT error (§13.4).
func IdempotencyConflictError(key string, existingOffset int64) *Error {
	return NewError(CodeIdempotencyConflict, map[string]any{"existingOffset": existingOffset},
		"idempotency key \"%s\" already names a different event at offset %d", key, existingOffset)
}

// OffsetConflictError builds the spec's OFFSET_CONFLICT error (§13.5).
func OffsetConflictError(expected, actual int64) *Error {
	return NewError(CodeOffsetConflict, map[string]any{"expected": expected, "actual": actual},
		"expected offset %d, but the next offset is %d", expected, actual)
}

// EmptyTypeError returns the spec's error for an event without a type (§13.2).
func EmptyTypeError() *Error {
	return NewError(CodeInvalidEvent, nil, "append: every event needs a non-empty type")
}
