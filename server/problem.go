package server

import (
	"net/http"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/problem"
)

// Error answers as data (docs/server.md#errors): every error answer's body is an RFC 9457
// problem details object, Content-Type application/problem+json, beside the code in
// Foldstream-Error-Code:
//
//	{"type": "https://foldstream.dev/errors/STREAM_NOT_FOUND", "title": "Stream not found",
//	 "status": 404, "detail": "stream \"/orders\" does not exist", "code": "STREAM_NOT_FOUND",
//	 "requestId": "3f9c0a1b2d4e-1k"}
//
// type is ProblemTypePrefix followed by the code: one stable identifier per code, compared as a
// string (it names the code; nothing is served at it). title is the code in words, the same for
// every answer with the code; detail is the message this answer's error gives (clientMessage).
// Extension members carry what a program needs beside the words: retryAfter (seconds, on every
// answer with Retry-After), limit (bytes, on a 413), violations (a refused batch's schema
// violations), failure (a failing processor's), and the members of the subscription APIs' own
// shape (error). One function writes them all (writeProblem), so an error a new route answers gets
// the shape without more code.

// ProblemTypePrefix is the start of every problem's type: the code follows it.
const ProblemTypePrefix = problem.TypePrefix

// ProblemContentType is the Content-Type of every error answer's body.
const ProblemContentType = problem.ContentType

// MaxViolations bounds the schema violations one refusal lists; a refusal with more says how many
// there were (violationsTotal) and that the list is cut (violationsTruncated).
const MaxViolations = foldtype.MaxViolations

// problemTitle is the code in words: "STREAM_NOT_FOUND" is "Stream not found".
func problemTitle(code foldtype.Code) string { return problem.Title(string(code)) }

// writeProblem answers an error with status and detail in the problem shape, with the extension
// members of ext. The code is the one already set in Foldstream-Error-Code (writeCoded,
// writeStoreError), else the status's general code (defaultCode); requestId and retryAfter are
// read from the answer's headers, so every writer of an error gets them.
func writeProblem(w http.ResponseWriter, status int, detail string, ext map[string]any) {
	code := foldtype.Code(w.Header().Get(HeaderErrorCode))
	if code == "" {
		code = defaultCode(status)
	}
	problem.Write(w, status, string(code), detail, ext)
}

// problemMembers returns the extension members fe's data gives a client: only the data listed
// here, whose values are written for clients, never the rest (a lease's key, a node's name).
// held reports that fe's own text was withheld: then its failure's text is too.
func problemMembers(fe *foldtype.Error, held bool) map[string]any {
	if fe == nil || len(fe.Data) == 0 {
		return nil
	}
	ext := map[string]any{}
	switch fe.Code {
	case foldtype.CodeInvalidEvent:
		if v, ok := fe.Data[foldtype.DataViolations].([]foldtype.Violation); ok {
			ext["violations"] = v
			if n, ok := fe.Data[foldtype.DataViolationsTotal].(int); ok && n > len(v) {
				ext["violationsTotal"] = n
				ext["violationsTruncated"] = true
			}
		}
	case foldtype.CodeTooLarge, foldtype.CodeEventTooLarge:
		if n, ok := dataInt(fe.Data, foldtype.DataLimit); ok {
			ext["limit"] = n
		} else if n, ok := dataInt(fe.Data, "maxBytes"); ok {
			ext["limit"] = n
		}
		if u, ok := fe.Data[foldtype.DataLimitUnit].(string); ok {
			ext["limitUnit"] = u
		}
	case foldtype.CodeProcessorFailing:
		f := map[string]any{}
		for _, k := range [...]string{"code", "message", "offset", "attempts", "nextRetry"} {
			if v, ok := fe.Data[k]; ok {
				f[k] = v
			}
		}
		if c, _ := f["code"].(string); held || withheld(foldtype.Code(c)) {
			f["message"] = withheldMessages[foldtype.Code(c)]
		}
		ext["failure"] = f
	}
	for _, k := range [...]string{"slug", "path"} {
		if v, ok := fe.Data[k].(string); ok && (fe.Code == foldtype.CodeProcessorFailing ||
			fe.Code == foldtype.CodeProcessorParked || fe.Code == foldtype.CodeCatchingUp || fe.Code == foldtype.CodeInvalidEvent) {
			ext[map[string]string{"slug": "processor", "path": "stream"}[k]] = v
		}
	}
	if len(ext) == 0 {
		return nil
	}
	return ext
}

// dataInt reads data[key] as an integer.
func dataInt(data map[string]any, key string) (int64, bool) {
	switch v := data[key].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), true
	}
	return 0, false
}
