package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Code is a stable, machine-readable error code. Classify errors with errors.Is against the
// sentinels below (or errors.As to *Error and its siblings), never by message text.
//
// A refusal from a foldstream server carries the server's own code (its Foldstream-Error-Code
// header), so Code holds exactly what the server said, also a code newer than this client; the
// constants below name the codes of foldstream's catalogue with the same names as package
// foldstream (errors.go; docs/server.md#errors). From a server that sends no code (any other
// Durable Streams server) the code is derived from the HTTP status: 400 BAD_REQUEST, 401
// UNAUTHORIZED, 403 FORBIDDEN (STALE_EPOCH with Producer-Epoch), 404 STREAM_NOT_FOUND, 405
// METHOD_NOT_ALLOWED, 408 REQUEST_TIMEOUT, 409 CONFLICT (STREAM_CLOSED with Stream-Closed), 410
// STREAM_GONE, 413 TOO_LARGE, 429 RATE_LIMITED, 500 INTERNAL, 501 NOT_SUPPORTED, 507
// INSUFFICIENT_STORAGE, any other 5xx UNAVAILABLE, anything else UNEXPECTED_STATUS.
type Code string

// Codes a server sends, named and spelled as in package foldstream's catalogue.
const (
	CodeStreamNotFound       Code = "STREAM_NOT_FOUND"         // 404: the stream does not exist or expired
	CodeStreamGone           Code = "STREAM_GONE"              // 410: soft-deleted stream, or an offset past retention
	CodeStreamDeleted        Code = "STREAM_DELETED"           // 410: the stream followed was deleted
	CodeStreamClosed         Code = "STREAM_CLOSED"            // 409 with Stream-Closed: the stream is closed
	CodeStreamPaused         Code = "STREAM_PAUSED"            // 423: the stream is paused; appends are refused until a resume
	CodeConflict             Code = "CONFLICT"                 // 409: configuration, content type or Stream-Seq conflict
	CodeIdempotencyConflict  Code = "IDEMPOTENCY_CONFLICT"     // 409: the idempotency key names a different event
	CodeOffsetConflict       Code = "OFFSET_CONFLICT"          // 409: Foldstream-Expected-Offset is not the tail
	CodeSequenceGap          Code = "SEQUENCE_GAP"             // 409 with Producer-Expected-Seq that cannot be resolved
	CodeStaleEpoch           Code = "STALE_EPOCH"              // 403: the producer was fenced by a newer epoch
	CodeBadRequest           Code = "BAD_REQUEST"              // 400: the server refused the request's syntax
	CodeInvalidStreamName    Code = "INVALID_STREAM_NAME"      // 400: the stream path breaks the naming rules
	CodeInvalidEvent         Code = "INVALID_EVENT"            // 400: an appended event is malformed
	CodeReservedKey          Code = "RESERVED_IDEMPOTENCY_KEY" // 400: an idempotency key of the processors' namespace
	CodeTooLarge             Code = "TOO_LARGE"                // 413: the body exceeds the server's limit
	CodeEventTooLarge        Code = "EVENT_TOO_LARGE"          // 413: one event exceeds the server's limit
	CodeUnauthorized         Code = "UNAUTHORIZED"             // 401: the request carries no valid credentials
	CodeForbidden            Code = "FORBIDDEN"                // 403: the credentials do not allow this operation here
	CodeNotRegistered        Code = "NOT_REGISTERED"           // 404: no such processor runs on the stream
	CodeCatchingUp           Code = "CATCHING_UP"              // 503: the processor has not reached the offset yet
	CodeProcessorParked      Code = "PROCESSOR_PARKED"         // 503: the processor stopped after an error
	CodeProcessorFailing     Code = "PROCESSOR_FAILING"        // 503: the processor's ProcessEvent keeps failing; the host retries it
	CodeProcessorPaused      Code = "PROCESSOR_PAUSED"         // 503: an operator (or the failure policy) paused the processor
	CodeLeaseLost            Code = "LEASE_LOST"               // 503: the node lost the processor's lease mid-read; retry
	CodeProcessTimeout       Code = "PROCESS_TIMEOUT"          // 504: the processor did not reach the offset in time
	CodeWaitTimeout          Code = "WAIT_TIMEOUT"             // 504: a wait ran out of time
	CodeInsufficientStorage  Code = "INSUFFICIENT_STORAGE"     // 507: the server's disk is full
	CodeClosed               Code = "CLOSED"                   // 503: the server is shutting down
	CodeUnavailable          Code = "UNAVAILABLE"              // 5xx: the server cannot serve now (after the retries ran out)
	CodeOverloaded           Code = "OVERLOADED"               // 503: a server limit is reached (after the retries ran out)
	CodeCommitOutcomeUnknown Code = "COMMIT_OUTCOME_UNKNOWN"   // 503: the write's commit was not confirmed; it may or may not be written
	CodeNoRoute              Code = "NO_ROUTE"                 // 404: no route serves the path
	CodeMethodNotAllowed     Code = "METHOD_NOT_ALLOWED"       // 405: the route does not take the method
	CodeRequestTimeout       Code = "REQUEST_TIMEOUT"          // 408: the body did not arrive in time
	CodeInternal             Code = "INTERNAL"                 // 500: a fault of the server

	CodeSubscriptionNotFound Code = "SUBSCRIPTION_NOT_FOUND" // 404: no subscription has the id
	CodeFenced               Code = "FENCED"                 // 409: the wake is no longer the subscription's current one
	CodeAlreadyClaimed       Code = "ALREADY_CLAIMED"        // 409: another worker holds the subscription's lease
	CodeWebhookURLRejected   Code = "WEBHOOK_URL_REJECTED"   // 400: the webhook URL targets a refused address
)

// Codes of the client's own, for failures no server reported.
const (
	CodeRateLimited      Code = "RATE_LIMITED"      // 429 after the retries ran out
	CodeUnsupported      Code = "NOT_SUPPORTED"     // 501: the server does not support the operation
	CodeUnexpectedStatus Code = "UNEXPECTED_STATUS" // any other status without a code
	CodeNetwork          Code = "NETWORK_ERROR"     // transport failure after the retries ran out
	CodeParse            Code = "PARSE_ERROR"       // a response could not be decoded
	CodeProducerClosed   Code = "PRODUCER_CLOSED"   // the producer was closed
	CodeInvalidArgument  Code = "INVALID_ARGUMENT"  // a caller-side argument was refused before sending
	CodeInvalidOffset    Code = "INVALID_OFFSET"    // a malformed offset was refused before sending
	CodeProducerFailed   Code = "PRODUCER_FAILED"   // the producer stopped after an earlier delivery error
)

// Error is a coded error from the client: the HTTP status when there was one, the server's
// response body (trimmed) and the request that failed.
type Error struct {
	// Code classifies the error.
	Code Code
	// Status is the HTTP status, or 0 when the request never got a response.
	Status int
	// Op names the operation, e.g. "append" or "read".
	Op string
	// URL is the request URL. Error shows it readable and without credentials (see
	// RedactURL); the field keeps it as sent.
	URL string
	// Message is the human-readable text.
	Message string
	// RequestID is the answer's X-Request-Id: a foldstream server logs what it withheld from the
	// message (a database's own words, for example) under this id.
	RequestID string
	// Err is the cause, if any (for example the transport error).
	Err error

	// The members of the answer's RFC 9457 problem body (docs/server.md#errors), when the server
	// sent one (a foldstream server always does); empty otherwise.

	// Type is the problem's type: a URI naming the code.
	Type string
	// Title is the code in words.
	Title string
	// Detail is what this answer says; Message holds it too.
	Detail string
	// RetryAfter is how long the server asked the client to wait (retryAfter, else Retry-After),
	// or 0.
	RetryAfter time.Duration
	// Limit is the limit a 413 went over, in LimitUnit ("bytes" or "messages"), or 0.
	Limit int64
	// LimitUnit is Limit's unit.
	LimitUnit string
	// Violations lists the schema violations of a refused batch (at most the server's cap: 100
	// for foldstream), each with its message's index and the value's JSON pointer.
	Violations []Violation
	// ViolationsTotal counts the violations found, also those the list leaves out.
	ViolationsTotal int
	// Failure is a failing processor's failure (PROCESSOR_FAILING), or nil.
	Failure *Failure
	// Members holds every member of the problem body as sent, for members this client does not
	// name.
	Members map[string]json.RawMessage
}

// Error returns a lowercase, single-line description.
func (e *Error) Error() string {
	s := string(e.Code)
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Status != 0 {
		s += " (" + strconv.Itoa(e.Status) + ")"
	}
	if e.URL != "" {
		s += " " + RedactURL(e.URL)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request id " + e.RequestID + ")"
	}
	if e.Err != nil {
		cause := e.Err
		// A transport error repeats the request URL, credentials and all: show only its cause.
		if ue, ok := errors.AsType[*url.Error](cause); ok && ue.Err != nil {
			cause = ue.Err
		}
		s += ": " + cause.Error()
	}
	return s
}

// RedactURL returns raw for a message: path and query unescaped for reading ("/v1/stream/carts/ivan",
// not "carts%2Fivan"), user information dropped and the value of every query parameter that looks
// like a credential (its name holds "token", "auth", "key", "secret", "pass" or "sig") replaced by
// REDACTED. A URL that does not parse is shown as "(unparsable URL)".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	s := u.Path
	if p, err := url.PathUnescape(u.EscapedPath()); err == nil {
		s = p
	}
	if u.Host != "" {
		s = u.Scheme + "://" + u.Host + s
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return s + "?(unparsable query)"
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(q)) {
			for _, v := range q[k] {
				if credentialParam(k) {
					v = "REDACTED"
				}
				parts = append(parts, k+"="+v)
			}
		}
		s += "?" + strings.Join(parts, "&")
	}
	return s
}

func credentialParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"token", "auth", "key", "secret", "pass", "sig"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStreamNotFound) and friends work: a sentinel (an *Error with only a code)
// matches every *Error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == 0 && t.Message == "" && t.Op == "" && t.Code == e.Code
}

// Sentinels for errors.Is: one per code.
var (
	ErrStreamNotFound       = &Error{Code: CodeStreamNotFound}
	ErrStreamGone           = &Error{Code: CodeStreamGone}
	ErrStreamDeleted        = &Error{Code: CodeStreamDeleted}
	ErrStreamClosed         = &Error{Code: CodeStreamClosed}
	ErrStreamPaused         = &Error{Code: CodeStreamPaused}
	ErrConflict             = &Error{Code: CodeConflict}
	ErrIdempotencyConflict  = &Error{Code: CodeIdempotencyConflict}
	ErrOffsetConflict       = &Error{Code: CodeOffsetConflict}
	ErrSequenceGap          = &Error{Code: CodeSequenceGap}
	ErrStaleEpoch           = &Error{Code: CodeStaleEpoch}
	ErrBadRequest           = &Error{Code: CodeBadRequest}
	ErrInvalidStreamName    = &Error{Code: CodeInvalidStreamName}
	ErrInvalidEvent         = &Error{Code: CodeInvalidEvent}
	ErrReservedKey          = &Error{Code: CodeReservedKey}
	ErrTooLarge             = &Error{Code: CodeTooLarge}
	ErrEventTooLarge        = &Error{Code: CodeEventTooLarge}
	ErrUnauthorized         = &Error{Code: CodeUnauthorized}
	ErrForbidden            = &Error{Code: CodeForbidden}
	ErrNotRegistered        = &Error{Code: CodeNotRegistered}
	ErrCatchingUp           = &Error{Code: CodeCatchingUp}
	ErrProcessorParked      = &Error{Code: CodeProcessorParked}
	ErrProcessorFailing     = &Error{Code: CodeProcessorFailing}
	ErrProcessorPaused      = &Error{Code: CodeProcessorPaused}
	ErrLeaseLost            = &Error{Code: CodeLeaseLost}
	ErrProcessTimeout       = &Error{Code: CodeProcessTimeout}
	ErrWaitTimeout          = &Error{Code: CodeWaitTimeout}
	ErrInsufficientStorage  = &Error{Code: CodeInsufficientStorage}
	ErrClosed               = &Error{Code: CodeClosed}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrCommitOutcomeUnknown = &Error{Code: CodeCommitOutcomeUnknown}
	ErrOverloaded           = &Error{Code: CodeOverloaded}
	ErrNoRoute              = &Error{Code: CodeNoRoute}
	ErrMethodNotAllowed     = &Error{Code: CodeMethodNotAllowed}
	ErrRequestTimeout       = &Error{Code: CodeRequestTimeout}
	ErrInternal             = &Error{Code: CodeInternal}

	ErrSubscriptionNotFound = &Error{Code: CodeSubscriptionNotFound}
	ErrFenced               = &Error{Code: CodeFenced}
	ErrAlreadyClaimed       = &Error{Code: CodeAlreadyClaimed}
	ErrWebhookURLRejected   = &Error{Code: CodeWebhookURLRejected}

	ErrRateLimited      = &Error{Code: CodeRateLimited}
	ErrUnsupported      = &Error{Code: CodeUnsupported}
	ErrUnexpectedStatus = &Error{Code: CodeUnexpectedStatus}
	ErrNetwork          = &Error{Code: CodeNetwork}
	ErrParse            = &Error{Code: CodeParse}
	ErrProducerClosed   = &Error{Code: CodeProducerClosed}
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument}
	ErrInvalidOffset    = &Error{Code: CodeInvalidOffset}
	ErrProducerFailed   = &Error{Code: CodeProducerFailed}
)

// CodeOf returns the code of the first coded error in err's chain, or "" when there is none.
func CodeOf(err error) Code {
	var sc *StreamClosedError
	if errors.As(err, &sc) {
		return CodeStreamClosed
	}
	var se *StaleEpochError
	if errors.As(err, &se) {
		return CodeStaleEpoch
	}
	var sg *SequenceGapError
	if errors.As(err, &sg) {
		return CodeSequenceGap
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// StreamClosedError reports a write to a closed stream (409 with Stream-Closed: true). It matches
// ErrStreamClosed with errors.Is.
type StreamClosedError struct {
	// FinalOffset is the stream's final tail (the 409's Stream-Next-Offset).
	FinalOffset string
}

// Error describes the closure.
func (e *StreamClosedError) Error() string {
	return "STREAM_CLOSED: the stream is closed at offset " + e.FinalOffset + "; no more appends are accepted"
}

// Is matches ErrStreamClosed.
func (e *StreamClosedError) Is(target error) bool { return target == ErrStreamClosed }

// StaleEpochError reports that the server fenced the producer: a producer with the same id claimed
// a newer epoch (403). It matches ErrStaleEpoch with errors.Is.
type StaleEpochError struct {
	// CurrentEpoch is the server's epoch for this producer id (the 403's Producer-Epoch).
	CurrentEpoch int64
}

// Error describes the fencing and what to do.
func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("STALE_EPOCH: producer epoch is stale, the server's epoch is %d; restart with a higher epoch or enable auto-claim", e.CurrentEpoch)
}

// Is matches ErrStaleEpoch.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// SequenceGapError reports a producer sequence gap that waiting cannot resolve (409 with
// Producer-Expected-Seq ≥ the sent seq). It matches ErrSequenceGap with errors.Is.
type SequenceGapError struct {
	// ExpectedSeq is the sequence number the server expected next.
	ExpectedSeq int64
	// ReceivedSeq is the sequence number the server received.
	ReceivedSeq int64
}

// Error describes the gap.
func (e *SequenceGapError) Error() string {
	return fmt.Sprintf("SEQUENCE_GAP: producer sequence gap, expected %d, received %d", e.ExpectedSeq, e.ReceivedSeq)
}

// Is matches ErrSequenceGap.
func (e *SequenceGapError) Is(target error) bool { return target == ErrSequenceGap }

// statusError maps a non-success response to a coded error. body is the (already read, bounded)
// response body: a problem body (application/problem+json) is decoded into the error's members,
// any other body is the message. The code is the server's Foldstream-Error-Code when it sent one,
// else the problem's code, else derived from the status (see Code).
func statusError(op, url string, resp *http.Response, body []byte) error {
	e := &Error{Code: Code(strings.TrimSpace(resp.Header.Get(HeaderErrorCode))), Op: op, URL: url, Status: resp.StatusCode,
		RequestID: requestIDOf(resp)}
	if !decodeProblem(e, resp.Header, body) {
		e.Message = string(trimBody(body))
	}
	code := e.Code
	if code == "" {
		code = codeOfStatus(resp.StatusCode)
		switch {
		case resp.StatusCode == http.StatusConflict && isTrue(resp.Header.Get(HeaderStreamClosed)):
			code = CodeStreamClosed
		case resp.StatusCode == http.StatusForbidden && resp.Header.Get(HeaderProducerEpoch) != "":
			code = CodeStaleEpoch
		}
	}
	switch code {
	case CodeStreamClosed:
		return &StreamClosedError{FinalOffset: resp.Header.Get(HeaderStreamNextOffset)}
	case CodeStaleEpoch:
		if n, err := strconv.ParseInt(resp.Header.Get(HeaderProducerEpoch), 10, 64); err == nil {
			return &StaleEpochError{CurrentEpoch: n}
		}
	}
	e.Code = code
	return e
}

// requestIDOf returns resp's X-Request-Id when it is short and printable (it goes into messages).
func requestIDOf(resp *http.Response) string {
	id := resp.Header.Get(HeaderRequestID)
	if len(id) > 64 {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return ""
		}
	}
	return id
}

// codeOfStatus is the code of an answer without Foldstream-Error-Code (see Code).
func codeOfStatus(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeStreamNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestTimeout:
		return CodeRequestTimeout
	case http.StatusConflict:
		return CodeConflict
	case http.StatusGone:
		return CodeStreamGone
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusInternalServerError:
		return CodeInternal
	case http.StatusNotImplemented:
		return CodeUnsupported
	case http.StatusInsufficientStorage:
		return CodeInsufficientStorage
	}
	if status >= 500 {
		return CodeUnavailable
	}
	return CodeUnexpectedStatus
}

func trimBody(b []byte) []byte {
	const max = 512
	if len(b) > max {
		b = b[:max]
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
