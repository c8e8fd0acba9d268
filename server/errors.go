package server

import (
	"net/http"

	"github.com/foldstream/foldstream"
)

// statusByCode is the one table that maps error codes to HTTP statuses. A coded error whose code is
// missing here is a fault of the server, answered 500 and logged.
var statusByCode = map[foldstream.Code]int{
	foldstream.CodeStreamNotFound: http.StatusNotFound,
	foldstream.CodeStreamGone:     http.StatusGone,
	foldstream.CodeStreamDeleted:  http.StatusGone,
	foldstream.CodeStreamClosed:   http.StatusConflict,
	// 423, not 409: a client reads a 409 as a sequence conflict (the TypeScript producer waits
	// for earlier sequences and resends), which would resend forever (docs/server.md#paused-streams).
	foldstream.CodeStreamPaused:         http.StatusLocked,
	foldstream.CodeConflict:             http.StatusConflict,
	foldstream.CodeIdempotencyConflict:  http.StatusConflict,
	foldstream.CodeOffsetConflict:       http.StatusConflict,
	foldstream.CodeSequenceGap:          http.StatusConflict,
	foldstream.CodeBadRequest:           http.StatusBadRequest,
	foldstream.CodeInvalidStreamName:    http.StatusBadRequest,
	foldstream.CodeInvalidEvent:         http.StatusBadRequest,
	foldstream.CodeReservedKey:          http.StatusBadRequest,
	foldstream.CodeTooLarge:             http.StatusRequestEntityTooLarge,
	foldstream.CodeEventTooLarge:        http.StatusRequestEntityTooLarge,
	foldstream.CodeStaleEpoch:           http.StatusForbidden,
	foldstream.CodeUnauthorized:         http.StatusUnauthorized,
	foldstream.CodeForbidden:            http.StatusForbidden,
	foldstream.CodeNotRegistered:        http.StatusNotFound,
	foldstream.CodeInsufficientStorage:  http.StatusInsufficientStorage,
	foldstream.CodeClosed:               http.StatusServiceUnavailable,
	foldstream.CodeUnavailable:          http.StatusServiceUnavailable,
	foldstream.CodeOverloaded:           http.StatusServiceUnavailable,
	foldstream.CodeCatchingUp:           http.StatusServiceUnavailable,
	foldstream.CodeProcessorParked:      http.StatusServiceUnavailable,
	foldstream.CodeProcessorFailing:     http.StatusServiceUnavailable,
	foldstream.CodeProcessTimeout:       http.StatusGatewayTimeout,
	foldstream.CodeWaitTimeout:          http.StatusGatewayTimeout,
	foldstream.CodeNoRoute:              http.StatusNotFound,
	foldstream.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	foldstream.CodeRequestTimeout:       http.StatusRequestTimeout,
	foldstream.CodeInternal:             http.StatusInternalServerError,
	foldstream.CodeSubscriptionNotFound: http.StatusNotFound,
	foldstream.CodeFenced:               http.StatusConflict,
	foldstream.CodeAlreadyClaimed:       http.StatusConflict,
	foldstream.CodeWebhookURLRejected:   http.StatusBadRequest,
}

// codeByStatus is the code of an error answer written without one (writeError): the catalogue's
// general code for the status. Handlers that know better name the code themselves (writeCoded).
var codeByStatus = map[int]foldstream.Code{
	http.StatusBadRequest:            foldstream.CodeBadRequest,
	http.StatusUnauthorized:          foldstream.CodeUnauthorized,
	http.StatusForbidden:             foldstream.CodeForbidden,
	http.StatusNotFound:              foldstream.CodeNoRoute,
	http.StatusMethodNotAllowed:      foldstream.CodeMethodNotAllowed,
	http.StatusRequestTimeout:        foldstream.CodeRequestTimeout,
	http.StatusConflict:              foldstream.CodeConflict,
	http.StatusGone:                  foldstream.CodeStreamGone,
	http.StatusRequestEntityTooLarge: foldstream.CodeTooLarge,
	http.StatusInternalServerError:   foldstream.CodeInternal,
	http.StatusServiceUnavailable:    foldstream.CodeUnavailable,
	http.StatusGatewayTimeout:        foldstream.CodeProcessTimeout,
	http.StatusInsufficientStorage:   foldstream.CodeInsufficientStorage,
}

// defaultCode returns the code an error answer with status carries when its writer named none:
// codeByStatus's, else BAD_REQUEST for any other 4xx and INTERNAL for any other status.
func defaultCode(status int) foldstream.Code {
	if c, ok := codeByStatus[status]; ok {
		return c
	}
	if status >= 400 && status < 500 {
		return foldstream.CodeBadRequest
	}
	return foldstream.CodeInternal
}

// statusOf returns the HTTP status of err's code, and false when err carries no code the table
// knows.
func statusOf(err error) (foldstream.Code, int, bool) {
	code := foldstream.CodeOf(err)
	status, ok := statusByCode[code]
	return code, status, ok
}

// writeCoded answers a refusal with code in the protocol's error shape: the status from
// statusByCode, the code in Foldstream-Error-Code, a plain-text message; 503s carry Retry-After
// (retryAfter seconds, at least 1) and 401s a Bearer challenge. It returns false, writing
// nothing, when the table has no status for code.
func writeCoded(w http.ResponseWriter, code foldstream.Code, msg string, retryAfter int) bool {
	status, ok := statusByCode[code]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set(HeaderErrorCode, string(code))
	switch status {
	case http.StatusServiceUnavailable:
		h.Set("Retry-After", itoa(int64(max(1, retryAfter))))
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="foldstream"`)
	}
	writeError(w, status, msg)
	return true
}
