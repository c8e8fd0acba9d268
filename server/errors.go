package server

import (
	"net/http"

	"github.com/foldstream/foldstream/foldtype"
)

// statusByCode is the one table that maps error codes to HTTP statuses. A coded error whose code is
// missing here is a fault of the server, answered 500 and logged.
var statusByCode = map[foldtype.Code]int{
	foldtype.CodeStreamNotFound: http.StatusNotFound,
	foldtype.CodeStreamGone:     http.StatusGone,
	foldtype.CodeStreamDeleted:  http.StatusGone,
	foldtype.CodeStreamClosed:   http.StatusConflict,
	// 423, not 409: a client reads a 409 as a sequence conflict (the TypeScript producer waits
	// for earlier sequences and resends), which would resend forever (docs/server.md#paused-streams).
	foldtype.CodeStreamPaused:         http.StatusLocked,
	foldtype.CodeConflict:             http.StatusConflict,
	foldtype.CodeIdempotencyConflict:  http.StatusConflict,
	foldtype.CodeOffsetConflict:       http.StatusConflict,
	foldtype.CodeSequenceGap:          http.StatusConflict,
	foldtype.CodeBadRequest:           http.StatusBadRequest,
	foldtype.CodeInvalidStreamName:    http.StatusBadRequest,
	foldtype.CodeInvalidEvent:         http.StatusBadRequest,
	foldtype.CodeReservedKey:          http.StatusBadRequest,
	foldtype.CodeTooLarge:             http.StatusRequestEntityTooLarge,
	foldtype.CodeEventTooLarge:        http.StatusRequestEntityTooLarge,
	foldtype.CodeStaleEpoch:           http.StatusForbidden,
	foldtype.CodeUnauthorized:         http.StatusUnauthorized,
	foldtype.CodeForbidden:            http.StatusForbidden,
	foldtype.CodeNotRegistered:        http.StatusNotFound,
	foldtype.CodeInsufficientStorage:  http.StatusInsufficientStorage,
	foldtype.CodeClosed:               http.StatusServiceUnavailable,
	foldtype.CodeUnavailable:          http.StatusServiceUnavailable,
	foldtype.CodeCommitOutcomeUnknown: http.StatusServiceUnavailable,
	foldtype.CodeOverloaded:           http.StatusServiceUnavailable,
	foldtype.CodeCatchingUp:           http.StatusServiceUnavailable,
	foldtype.CodeProcessorParked:      http.StatusServiceUnavailable,
	foldtype.CodeProcessorFailing:     http.StatusServiceUnavailable,
	foldtype.CodeProcessorPaused:      http.StatusServiceUnavailable,
	// A node that lost a processor's lease while a read ran on it: the node that holds it now
	// answers the next try.
	foldtype.CodeLeaseLost:            http.StatusServiceUnavailable,
	foldtype.CodeProcessTimeout:       http.StatusGatewayTimeout,
	foldtype.CodeWaitTimeout:          http.StatusGatewayTimeout,
	foldtype.CodeNoRoute:              http.StatusNotFound,
	foldtype.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	foldtype.CodeRequestTimeout:       http.StatusRequestTimeout,
	foldtype.CodeInternal:             http.StatusInternalServerError,
	foldtype.CodeSubscriptionNotFound: http.StatusNotFound,
	foldtype.CodeFenced:               http.StatusConflict,
	foldtype.CodeAlreadyClaimed:       http.StatusConflict,
	foldtype.CodeWebhookURLRejected:   http.StatusBadRequest,
}

// serverFaults are the catalogue's codes that no request is answered with, each for its reason: an
// error carrying one that reaches a handler is a fault of the server, answered 500 INTERNAL and
// logged. Every other code of the catalogue has its status in statusByCode
// (TestEveryCatalogueCodeHasAnAnswer), so a new code cannot become a 500 unnoticed.
var serverFaults = map[foldtype.Code]string{
	foldtype.CodeReduceCheckpointTooLarge: "the host parks the processor: its reads answer PROCESSOR_PARKED",
	foldtype.CodeProcessEventFailed:       "the host marks the processor failing: its reads answer PROCESSOR_FAILING",
	foldtype.CodeUndeclaredEmit:           "a ProcessEvent failure: its reads answer PROCESSOR_FAILING",
	foldtype.CodePermanentFailure:         "a revive's failure, shown in the processor's status (workFailed)",
	foldtype.CodeLoopLimit:                "recorded as a fact on the stream, not an answer",
	foldtype.CodeUndeclaredChange:         "reported by the live state, which corrects the clients itself",
	foldtype.CodeEventUnreadable:          "a stored event that does not decode: the store's data is damaged",
	foldtype.CodeInvalidContract:          "refused when a processor is defined, before any request",
	foldtype.CodeInvalidConfig:            "refused when the store, host or server is built",
	foldtype.CodeStoreLocked:              "opening the store fails",
	foldtype.CodeStoreReadOnly:            "opening the store fails",
	foldtype.CodeStoreSchema:              "opening the store fails",
}

// codeByStatus is the code of an error answer written without one (writeError): the catalogue's
// general code for the status. Handlers that know better name the code themselves (writeCoded).
var codeByStatus = map[int]foldtype.Code{
	http.StatusBadRequest:            foldtype.CodeBadRequest,
	http.StatusUnauthorized:          foldtype.CodeUnauthorized,
	http.StatusForbidden:             foldtype.CodeForbidden,
	http.StatusNotFound:              foldtype.CodeNoRoute,
	http.StatusMethodNotAllowed:      foldtype.CodeMethodNotAllowed,
	http.StatusRequestTimeout:        foldtype.CodeRequestTimeout,
	http.StatusConflict:              foldtype.CodeConflict,
	http.StatusGone:                  foldtype.CodeStreamGone,
	http.StatusRequestEntityTooLarge: foldtype.CodeTooLarge,
	http.StatusInternalServerError:   foldtype.CodeInternal,
	http.StatusServiceUnavailable:    foldtype.CodeUnavailable,
	http.StatusGatewayTimeout:        foldtype.CodeProcessTimeout,
	http.StatusInsufficientStorage:   foldtype.CodeInsufficientStorage,
}

// defaultCode returns the code an error answer with status carries when its writer named none:
// codeByStatus's, else BAD_REQUEST for any other 4xx and INTERNAL for any other status.
func defaultCode(status int) foldtype.Code {
	if c, ok := codeByStatus[status]; ok {
		return c
	}
	if status >= 400 && status < 500 {
		return foldtype.CodeBadRequest
	}
	return foldtype.CodeInternal
}

// statusOf returns the HTTP status of err's code, and false when err carries no code the table
// knows.
func statusOf(err error) (foldtype.Code, int, bool) {
	code := foldtype.CodeOf(err)
	status, ok := statusByCode[code]
	return code, status, ok
}

// writeCoded answers a refusal with code in the error shape: the status from statusByCode, the
// code in Foldstream-Error-Code, a problem body with msg as its detail; 503s carry Retry-After
// (retryAfter seconds, at least 1) and 401s a Bearer challenge. It returns false, writing
// nothing, when the table has no status for code.
func writeCoded(w http.ResponseWriter, code foldtype.Code, msg string, retryAfter int) bool {
	return writeCodedProblem(w, code, msg, retryAfter, nil)
}

// writeCodedProblem is writeCoded with the extension members ext (problemMembers).
func writeCodedProblem(w http.ResponseWriter, code foldtype.Code, msg string, retryAfter int, ext map[string]any) bool {
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
	writeProblem(w, status, msg, ext)
	return true
}
