package server

import (
	"net/http"

	"github.com/foldstream/foldstream"
)

// statusByCode is the one table that maps error codes to HTTP statuses. A coded error whose code is
// missing here is a fault of the server, answered 500 and logged.
var statusByCode = map[foldstream.Code]int{
	foldstream.CodeStreamNotFound:      http.StatusNotFound,
	foldstream.CodeStreamGone:          http.StatusGone,
	foldstream.CodeStreamDeleted:       http.StatusGone,
	foldstream.CodeStreamClosed:        http.StatusConflict,
	foldstream.CodeConflict:            http.StatusConflict,
	foldstream.CodeIdempotencyConflict: http.StatusConflict,
	foldstream.CodeOffsetConflict:      http.StatusConflict,
	foldstream.CodeSequenceGap:         http.StatusConflict,
	foldstream.CodeBadRequest:          http.StatusBadRequest,
	foldstream.CodeInvalidStreamName:   http.StatusBadRequest,
	foldstream.CodeInvalidEvent:        http.StatusBadRequest,
	foldstream.CodeReservedKey:         http.StatusBadRequest,
	foldstream.CodeTooLarge:            http.StatusRequestEntityTooLarge,
	foldstream.CodeEventTooLarge:       http.StatusRequestEntityTooLarge,
	foldstream.CodeStaleEpoch:          http.StatusForbidden,
	foldstream.CodeUnauthorized:        http.StatusUnauthorized,
	foldstream.CodeForbidden:           http.StatusForbidden,
	foldstream.CodeNotRegistered:       http.StatusNotFound,
	foldstream.CodeInsufficientStorage: http.StatusInsufficientStorage,
	foldstream.CodeClosed:              http.StatusServiceUnavailable,
	foldstream.CodeUnavailable:         http.StatusServiceUnavailable,
	foldstream.CodeOverloaded:          http.StatusServiceUnavailable,
	foldstream.CodeCatchingUp:          http.StatusServiceUnavailable,
	foldstream.CodeProcessorParked:     http.StatusServiceUnavailable,
	foldstream.CodeProcessTimeout:      http.StatusGatewayTimeout,
	foldstream.CodeWaitTimeout:         http.StatusGatewayTimeout,
}

// statusOf returns the HTTP status of err's code, and false when err carries no code the table
// knows.
func statusOf(err error) (foldstream.Code, int, bool) {
	code := foldstream.CodeOf(err)
	status, ok := statusByCode[code]
	return code, status, ok
}
