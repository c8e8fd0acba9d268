package client

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/internal/wire"
)

// Violation is one way a message of a refused batch breaks a payload schema: a foldstream server
// lists every one in its INVALID_EVENT answer (docs/server.md#errors).
type Violation struct {
	// Index is the message's place in the batch: 0 is the first element of the JSON array.
	Index int `json:"index"`
	// Pointer is the JSON pointer (RFC 6901) of the value that breaks the schema, within the
	// message ("/payload/qty"; "/payload" for the payload itself).
	Pointer string `json:"pointer"`
	// Message says what is wrong with the value.
	Message string `json:"message"`
}

// Failure is a failing processor's failure, as a PROCESSOR_FAILING answer carries it.
type Failure struct {
	// Code is the failure's code (for example PROCESS_EVENT_FAILED).
	Code Code `json:"code"`
	// Message is the failure's message.
	Message string `json:"message"`
	// Offset is the offset of the event the processor fails at.
	Offset int64 `json:"offset"`
	// Attempts counts the tries so far.
	Attempts int `json:"attempts"`
	// NextRetry is when the host tries again (RFC 3339), or "".
	NextRetry string `json:"nextRetry"`
}

// problem is an error answer's RFC 9457 body as foldstream writes it; extension members this
// client does not name stay in Error.Members.
type problem struct {
	Type                string      `json:"type"`
	Title               string      `json:"title"`
	Detail              string      `json:"detail"`
	Code                string      `json:"code"`
	RequestID           string      `json:"requestId"`
	RetryAfter          *float64    `json:"retryAfter"`
	Limit               *int64      `json:"limit"`
	LimitUnit           string      `json:"limitUnit"`
	Violations          []Violation `json:"violations"`
	ViolationsTotal     int         `json:"violationsTotal"`
	ViolationsTruncated bool        `json:"violationsTruncated"`
	Failure             *Failure    `json:"failure"`
}

// maxProblemMembers bounds the members a decoded problem keeps in Error.Members.
const maxProblemMembers = 64

// decodeProblem fills e from body when header says it is a problem (Content-Type
// application/problem+json) that decodes as a JSON object; it reports whether it did. A body
// that does not decode leaves e as it was: the caller keeps its text as the message.
func decodeProblem(e *Error, header http.Header, body []byte) bool {
	mt, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil || mt != wire.ProblemContentType {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil || members == nil {
		return false
	}
	var p problem
	if json.Unmarshal(body, &p) != nil {
		// A member of the wrong type (a server newer or other than this client's): keep the
		// members that decode on their own.
		p = problem{}
		for name, dst := range map[string]any{"type": &p.Type, "title": &p.Title, "detail": &p.Detail, "code": &p.Code,
			"requestId": &p.RequestID} {
			if raw, ok := members[name]; ok {
				_ = json.Unmarshal(raw, dst)
			}
		}
	}
	e.Type, e.Title, e.Detail = p.Type, p.Title, p.Detail
	if p.Detail != "" {
		e.Message = p.Detail
	} else if p.Title != "" {
		e.Message = p.Title
	}
	if e.Code == "" && p.Code != "" && len(p.Code) <= 64 {
		e.Code = Code(p.Code)
	}
	if e.RequestID == "" && printable(p.RequestID) {
		e.RequestID = p.RequestID
	}
	if p.RetryAfter != nil && *p.RetryAfter >= 0 && *p.RetryAfter < 1e6 {
		e.RetryAfter = time.Duration(*p.RetryAfter * float64(time.Second))
	} else if n, err := strconv.Atoi(header.Get("Retry-After")); err == nil && n >= 0 && n < 1e6 {
		e.RetryAfter = time.Duration(n) * time.Second
	}
	if p.Limit != nil {
		e.Limit = *p.Limit
		e.LimitUnit = p.LimitUnit
		if e.LimitUnit == "" {
			e.LimitUnit = "bytes"
		}
	}
	e.Violations = p.Violations
	e.ViolationsTotal = max(p.ViolationsTotal, len(p.Violations))
	e.Failure = p.Failure
	if len(members) <= maxProblemMembers {
		e.Members = members
	}
	return true
}

// printable reports whether s is short, printable ASCII (it goes into messages).
func printable(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
