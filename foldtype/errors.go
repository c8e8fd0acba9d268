package foldtype

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Callers classify errors by code (with errors.Is
// against the sentinels below, or errors.As to *Error), never by message text.
type Code string

// Error codes of the engine and its streams (docs/engine.md#errors-and-reporting). The first seven
// are the processor contract's own codes; the rest give a code to refusals it leaves
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
	// CodeUndeclaredChange: LiveState.SetChanged was not told of a member that changed; the
	// holder corrected the clients' state and reported it.
	CodeUndeclaredChange Code = "UNDECLARED_CHANGE"
	// CodeProcessTimeout: WaitUntilProcessed did not see the offset in time.
	CodeProcessTimeout Code = "PROCESS_TIMEOUT"
	// CodeInvalidContract: a contract definition was refused.
	CodeInvalidContract Code = "INVALID_CONTRACT"
	// CodeClosed: the engine, store or host was closed or is shutting down; nothing more is
	// accepted. (A stream closed by its writer is CodeStreamClosed.)
	CodeClosed Code = "CLOSED"
)

// Error codes of the store, the HTTP protocol view, the host and the server. The server maps each
// to one HTTP status (see package server); the status a code gets is noted beside it.
const (
	// CodeStreamNotFound: the stream (or a fork source) does not exist or has expired (404).
	CodeStreamNotFound Code = "STREAM_NOT_FOUND"
	// CodeStreamGone: the stream was soft-deleted, or expired while forks still read it (410).
	CodeStreamGone Code = "STREAM_GONE"
	// CodeStreamDeleted: the stream a subscription or engine followed was deleted; its
	// checkpoints and claims went with it (a stream created again at the path starts afresh).
	CodeStreamDeleted Code = "STREAM_DELETED"
	// CodeStreamClosed: the stream was closed by its writer and takes no more appends (409).
	CodeStreamClosed Code = "STREAM_CLOSED"
	// CodeConflict: the request contradicts the stream's configuration or state, for example a
	// different content type or a Stream-Seq regression (409).
	CodeConflict Code = "CONFLICT"
	// CodeBadRequest: the request is malformed (400).
	CodeBadRequest Code = "BAD_REQUEST"
	// CodeInvalidStreamName: a stream path breaks the naming rules (400).
	CodeInvalidStreamName Code = "INVALID_STREAM_NAME"
	// CodeTooLarge: the request holds more than a limit allows (413).
	CodeTooLarge Code = "TOO_LARGE"
	// CodeStaleEpoch: an idempotent producer's epoch is older than the stream's (403).
	CodeStaleEpoch Code = "STALE_EPOCH"
	// CodeSequenceGap: an idempotent producer skipped sequence numbers (409).
	CodeSequenceGap Code = "SEQUENCE_GAP"
	// CodeReservedKey: an HTTP writer used an idempotency key from the namespace reserved for
	// processors' own emitted events (400).
	CodeReservedKey Code = "RESERVED_IDEMPOTENCY_KEY"
	// CodeStoreLocked: another process already has the store's database file open (Open fails).
	CodeStoreLocked Code = "STORE_LOCKED"
	// CodeStoreReadOnly: the store's database cannot be written (Open fails).
	CodeStoreReadOnly Code = "STORE_READ_ONLY"
	// CodeInvalidConfig: a configuration value is refused (an unknown setting, a negative size, a
	// database name no linked driver opens); the constructor fails and says what to give instead.
	CodeInvalidConfig Code = "INVALID_CONFIG"
	// CodeInsufficientStorage: the disk (or database) is full; nothing was acknowledged, and the
	// store recovers by itself once space is free (507).
	CodeInsufficientStorage Code = "INSUFFICIENT_STORAGE"
	// CodeUnavailable: the store's database cannot be reached right now; retry later (503).
	CodeUnavailable Code = "UNAVAILABLE"
	// CodeCommitOutcomeUnknown: the write's COMMIT was sent but the database did not confirm it
	// within the write deadline (the connection stalled or broke), so whether it was written is
	// not known. Retry an idempotent write (a producer's batch, an idempotency key) to settle it;
	// a plain append retried blindly may be written twice (503).
	CodeCommitOutcomeUnknown Code = "COMMIT_OUTCOME_UNKNOWN"
	// CodeOverloaded: a server limit (live readers, connections, bytes in flight) is reached;
	// retry after the Retry-After delay (503).
	CodeOverloaded Code = "OVERLOADED"
	// CodeUnauthorized: the request carries no valid credentials (401).
	CodeUnauthorized Code = "UNAUTHORIZED"
	// CodeForbidden: the credentials do not allow this operation on this path (403).
	CodeForbidden Code = "FORBIDDEN"
	// CodeNotRegistered: no processor with this slug runs on this stream (404).
	CodeNotRegistered Code = "NOT_REGISTERED"
	// CodeCatchingUp: the processor has not yet reached the requested offset; retry after the
	// Retry-After delay (503).
	CodeCatchingUp Code = "CATCHING_UP"
	// CodeProcessorParked: the processor stopped after an error it cannot retry past (for
	// example a conflict on one of its own emitted events); its route reports the cause (503).
	CodeProcessorParked Code = "PROCESSOR_PARKED"
	// CodeLeaseLost: this node no longer holds the lease of the processor it ran, so its
	// checkpoint write was refused (another node owns it now).
	CodeLeaseLost Code = "LEASE_LOST"
	// CodeStoreSchema: the store's database uses a schema this foldstream does not know (written
	// by a newer version, or not a foldstream store); Open fails and says what to do.
	CodeStoreSchema Code = "STORE_SCHEMA"
	// CodeSubscriptionNotFound: no subscription has this id (it was never created, or was
	// deleted) (404).
	CodeSubscriptionNotFound Code = "SUBSCRIPTION_NOT_FOUND"
	// CodeFenced: a callback, ack or release names a wake (wake id and generation) that is no
	// longer the subscription's current one, or whose lease ran out; it changed nothing (409).
	CodeFenced Code = "FENCED"
	// CodeAlreadyClaimed: another worker holds the subscription's lease; its data names the
	// current holder and generation (409).
	CodeAlreadyClaimed Code = "ALREADY_CLAIMED"
	// CodeWebhookURLRejected: a subscription's webhook URL is not allowed (not https, or a
	// loopback, private or link-local target the server does not allow) (400).
	CodeWebhookURLRejected Code = "WEBHOOK_URL_REJECTED"
)

// Error codes of the HTTP server's own refusals, for requests that never reach a stream.
const (
	// CodeNoRoute: no route serves this path (404).
	CodeNoRoute Code = "NO_ROUTE"
	// CodeMethodNotAllowed: the route does not take this method; the Allow header lists those it
	// takes (405).
	CodeMethodNotAllowed Code = "METHOD_NOT_ALLOWED"
	// CodeRequestTimeout: the request body did not arrive in time (408).
	CodeRequestTimeout Code = "REQUEST_TIMEOUT"
	// CodeInternal: a fault of the server, logged with its cause; retrying may not help (500).
	CodeInternal Code = "INTERNAL"
)

// Error is a coded error carrying the data a caller needs beside a human message.
type Error struct {
	// Code classifies the error.
	Code Code
	// Message is the human-readable text (the documented wording where docs/engine.md gives one).
	Message string
	// Data holds machine-readable details, e.g. {"existingOffset": 3}.
	Data map[string]any
	// Retryable is false for errors that retrying cannot fix (docs/engine.md#the-latch).
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
// errors.Is(err, foldtype.ErrOffsetConflict) works for every error carrying that code.
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
	ErrUndeclaredChange         = &Error{Code: CodeUndeclaredChange}
	ErrProcessTimeout           = &Error{Code: CodeProcessTimeout}
	ErrInvalidContract          = &Error{Code: CodeInvalidContract}
	ErrClosed                   = &Error{Code: CodeClosed}

	ErrStreamNotFound       = &Error{Code: CodeStreamNotFound}
	ErrStreamGone           = &Error{Code: CodeStreamGone}
	ErrStreamDeleted        = &Error{Code: CodeStreamDeleted}
	ErrStreamClosed         = &Error{Code: CodeStreamClosed}
	ErrConflict             = &Error{Code: CodeConflict}
	ErrBadRequest           = &Error{Code: CodeBadRequest}
	ErrInvalidStreamName    = &Error{Code: CodeInvalidStreamName}
	ErrTooLarge             = &Error{Code: CodeTooLarge}
	ErrStaleEpoch           = &Error{Code: CodeStaleEpoch}
	ErrSequenceGap          = &Error{Code: CodeSequenceGap}
	ErrReservedKey          = &Error{Code: CodeReservedKey}
	ErrStoreLocked          = &Error{Code: CodeStoreLocked}
	ErrStoreReadOnly        = &Error{Code: CodeStoreReadOnly}
	ErrInvalidConfig        = &Error{Code: CodeInvalidConfig}
	ErrInsufficientStorage  = &Error{Code: CodeInsufficientStorage}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrCommitOutcomeUnknown = &Error{Code: CodeCommitOutcomeUnknown}
	ErrOverloaded           = &Error{Code: CodeOverloaded}
	ErrUnauthorized         = &Error{Code: CodeUnauthorized}
	ErrForbidden            = &Error{Code: CodeForbidden}
	ErrNotRegistered        = &Error{Code: CodeNotRegistered}
	ErrCatchingUp           = &Error{Code: CodeCatchingUp}
	ErrProcessorParked      = &Error{Code: CodeProcessorParked}
	ErrLeaseLost            = &Error{Code: CodeLeaseLost}
	ErrStoreSchema          = &Error{Code: CodeStoreSchema}

	ErrNoRoute          = &Error{Code: CodeNoRoute}
	ErrMethodNotAllowed = &Error{Code: CodeMethodNotAllowed}
	ErrRequestTimeout   = &Error{Code: CodeRequestTimeout}
	ErrInternal         = &Error{Code: CodeInternal}
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

// IdempotencyConflictError builds the IDEMPOTENCY_CONFLICT error (docs/engine.md#idempotency), for
// the store, the test stand-ins and custom [Stream] implementations.
func IdempotencyConflictError(key string, existingOffset int64) *Error {
	return NewError(CodeIdempotencyConflict, map[string]any{"existingOffset": existingOffset},
		"idempotency key \"%s\" already names a different event at offset %d", key, existingOffset)
}

// OffsetConflictError builds the OFFSET_CONFLICT error (docs/engine.md#the-offset-precondition),
// for the store, the test stand-ins and custom [Stream] implementations.
func OffsetConflictError(expected, actual int64) *Error {
	return NewError(CodeOffsetConflict, map[string]any{"expected": expected, "actual": actual},
		"expected offset %d, but the next offset is %d", expected, actual)
}

// EmptyTypeError returns the INVALID_EVENT error for an event without a type
// (docs/engine.md#appending-events); [PrepareEventInput] returns it.
func EmptyTypeError() *Error {
	return NewError(CodeInvalidEvent, nil, "every event needs a non-empty type")
}
