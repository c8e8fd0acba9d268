package server

import (
	"net/http"

	"github.com/foldstream/foldstream"
)

// codeStatus is the one table from error codes to HTTP statuses (the status each code gets is
// also noted beside it in errors.go). A code missing here answers 500 and is logged: it is the
// server's failure, never the client's.
var codeStatus = map[foldstream.Code]int{
	foldstream.CodeBadRequest:          http.StatusBadRequest,
	foldstream.CodeInvalidStreamName:   http.StatusBadRequest,
	foldstream.CodeInvalidEvent:        http.StatusBadRequest,
	foldstream.CodeReservedKey:         http.StatusBadRequest,
	foldstream.CodeUnauthorized:        http.StatusUnauthorized,
	foldstream.CodeForbidden:           http.StatusForbidden,
	foldstream.CodeStaleEpoch:          http.StatusForbidden,
	foldstream.CodeStreamNotFound:      http.StatusNotFound,
	foldstream.CodeNotRegistered:       http.StatusNotFound,
	foldstream.CodeConflict:            http.StatusConflict,
	foldstream.CodeStreamClosed:        http.StatusConflict,
	foldstream.CodeSequenceGap:         http.StatusConflict,
	foldstream.CodeIdempotencyConflict: http.StatusConflict,
	foldstream.CodeOffsetConflict:      http.StatusConflict,
	foldstream.CodeStreamGone:          http.StatusGone,
	foldstream.CodeTooLarge:            http.StatusRequestEntityTooLarge,
	foldstream.CodeEventTooLarge:       http.StatusRequestEntityTooLarge,
	foldstream.CodeClosed:              http.StatusServiceUnavailable,
	foldstream.CodeUnavailable:         http.StatusServiceUnavailable,
	foldstream.CodeOverloaded:          http.StatusServiceUnavailable,
	foldstream.CodeCatchingUp:          http.StatusServiceUnavailable,
	foldstream.CodeProcessorParked:     http.StatusServiceUnavailable,
	foldstream.CodeProcessTimeout:      http.StatusGatewayTimeout,
	foldstream.CodeWaitTimeout:         http.StatusGatewayTimeout,
	foldstream.CodeInsufficientStorage: http.StatusInsufficientStorage,
}

// statusOf returns the HTTP status of code, or 0 when the table has none.
func statusOf(code foldstream.Code) int { return codeStatus[code] }

// writeCoded answers a coded refusal in the protocol's error shape: the status from codeStatus,
// the code in Foldstream-Error-Code, a plain-text message; 503s carry Retry-After (in seconds,
// retryAfter, at least 1) and 401s a WWW-Authenticate challenge. It returns false, writing
// nothing, when the code has no status.
func writeCoded(w http.ResponseWriter, code foldstream.Code, msg string, retryAfter int) bool {
	status := statusOf(code)
	if status == 0 {
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
