package client

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Code is a stable, machine-readable error code. Classify errors with errors.Is against the
// sentinels below (or errors.As to *Error and its siblings), never by message text.
type Code string

// Error codes.
const (
	CodeNotFound         Code = "NOT_FOUND"         // 404: the stream does not exist or expired
	CodeConflict         Code = "CONFLICT"          // 409: configuration, content type or Stream-Seq conflict
	CodeStreamClosed     Code = "STREAM_CLOSED"     // 409 with Stream-Closed: the stream is closed
	CodeStreamPaused     Code = "STREAM_PAUSED"     // 423: the stream is paused; appends resume after a resume
	CodeGone             Code = "GONE"              // 410: soft-deleted stream or offset past retention
	CodePayloadTooLarge  Code = "PAYLOAD_TOO_LARGE" // 413: the body exceeds the server's limit
	CodeBadRequest       Code = "BAD_REQUEST"       // 400: the server refused the request's syntax
	CodeRateLimited      Code = "RATE_LIMITED"      // 429 after the retries ran out
	CodeUnavailable      Code = "UNAVAILABLE"       // 5xx after the retries ran out
	CodeUnexpectedStatus Code = "UNEXPECTED_STATUS" // any other status
	CodeNetwork          Code = "NETWORK_ERROR"     // transport failure after the retries ran out
	CodeParse            Code = "PARSE_ERROR"       // a response could not be decoded
	CodeStaleEpoch       Code = "STALE_EPOCH"       // 403: the producer was fenced by a newer epoch
	CodeSequenceGap      Code = "SEQUENCE_GAP"      // 409 with Producer-Expected-Seq that cannot be resolved
	CodeProducerClosed   Code = "PRODUCER_CLOSED"   // the producer was closed
	CodeInvalidArgument  Code = "INVALID_ARGUMENT"  // a caller-side argument was refused before sending
	CodeInvalidOffset    Code = "INVALID_OFFSET"    // a malformed offset was refused before sending
	CodeUnsupported      Code = "NOT_SUPPORTED"     // the server does not support the operation (405/501)
	CodeTimeout          Code = "TIMEOUT"           // a deadline passed
	CodeProducerFailed   Code = "PRODUCER_FAILED"   // the producer stopped after an earlier delivery error
	CodeUnauthorized     Code = "UNAUTHORIZED"      // 401: the request carries no valid credentials
	CodeForbidden        Code = "FORBIDDEN"         // 403: the credentials do not allow this operation here
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
	// Err is the cause, if any (for example the transport error).
	Err error
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

// Is makes errors.Is(err, ErrNotFound) and friends work: a sentinel (an *Error with only a code)
// matches every *Error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == 0 && t.Message == "" && t.Op == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrConflict         = &Error{Code: CodeConflict}
	ErrStreamClosed     = &Error{Code: CodeStreamClosed}
	ErrStreamPaused     = &Error{Code: CodeStreamPaused}
	ErrGone             = &Error{Code: CodeGone}
	ErrPayloadTooLarge  = &Error{Code: CodePayloadTooLarge}
	ErrBadRequest       = &Error{Code: CodeBadRequest}
	ErrRateLimited      = &Error{Code: CodeRateLimited}
	ErrUnavailable      = &Error{Code: CodeUnavailable}
	ErrUnexpectedStatus = &Error{Code: CodeUnexpectedStatus}
	ErrNetwork          = &Error{Code: CodeNetwork}
	ErrParse            = &Error{Code: CodeParse}
	ErrStaleEpoch       = &Error{Code: CodeStaleEpoch}
	ErrSequenceGap      = &Error{Code: CodeSequenceGap}
	ErrProducerClosed   = &Error{Code: CodeProducerClosed}
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument}
	ErrInvalidOffset    = &Error{Code: CodeInvalidOffset}
	ErrUnsupported      = &Error{Code: CodeUnsupported}
	ErrProducerFailed   = &Error{Code: CodeProducerFailed}
	ErrUnauthorized     = &Error{Code: CodeUnauthorized}
	ErrForbidden        = &Error{Code: CodeForbidden}
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
// response body used as the message.
func statusError(op, url string, resp *http.Response, body []byte) error {
	msg := string(trimBody(body))
	e := &Error{Op: op, URL: url, Status: resp.StatusCode, Message: msg}
	switch resp.StatusCode {
	case http.StatusNotFound:
		e.Code = CodeNotFound
	case http.StatusConflict:
		if isTrue(resp.Header.Get(HeaderStreamClosed)) {
			return &StreamClosedError{FinalOffset: resp.Header.Get(HeaderStreamNextOffset)}
		}
		e.Code = CodeConflict
	case http.StatusLocked:
		e.Code = CodeStreamPaused
	case http.StatusGone:
		e.Code = CodeGone
	case http.StatusRequestEntityTooLarge:
		e.Code = CodePayloadTooLarge
	case http.StatusBadRequest:
		e.Code = CodeBadRequest
	case http.StatusTooManyRequests:
		e.Code = CodeRateLimited
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		e.Code = CodeUnsupported
	case http.StatusForbidden:
		if ep := resp.Header.Get(HeaderProducerEpoch); ep != "" {
			if n, err := strconv.ParseInt(ep, 10, 64); err == nil {
				return &StaleEpochError{CurrentEpoch: n}
			}
		}
		e.Code = CodeForbidden
	case http.StatusUnauthorized:
		e.Code = CodeUnauthorized
	default:
		if resp.StatusCode >= 500 {
			e.Code = CodeUnavailable
		} else {
			e.Code = CodeUnexpectedStatus
		}
	}
	return e
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
