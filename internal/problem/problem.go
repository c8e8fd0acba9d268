// Package problem writes foldstream's error answers as RFC 9457 problem details
// (docs/server.md#errors), for the server and the handlers it serves (the console's files), so
// that every error answer has the one shape. It imports nothing beyond the standard library and
// internal/wire.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/foldstream/foldstream/internal/wire"
)

// TypePrefix is the start of every problem's type: the code follows it. The type is an identifier
// of the code, compared as a string.
const TypePrefix = "https://foldstream.dev/errors/"

// ContentType is the Content-Type of every error answer's body.
const ContentType = wire.ProblemContentType

// Title is a code in words, the problem's title: "STREAM_NOT_FOUND" is "Stream not found".
func Title(code string) string {
	s := strings.ToLower(strings.ReplaceAll(code, "_", " "))
	if s == "" {
		return "Error"
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Write answers an error with status, code and detail in the problem shape, with the extension
// members of ext (which must not name the standard members: type, title, status, detail, code,
// requestId, retryAfter). The code goes into wire.HeaderErrorCode too; requestId is the answer's
// wire.HeaderRequestID and retryAfter its Retry-After (whole seconds), when they are set.
func Write(w http.ResponseWriter, status int, code, detail string, ext map[string]any) {
	h := w.Header()
	h.Set(wire.HeaderErrorCode, code)
	body := make(map[string]any, 8+len(ext))
	for k, v := range ext {
		body[k] = v
	}
	body["type"] = TypePrefix + code
	body["title"] = Title(code)
	body["status"] = status
	body["detail"] = detail
	body["code"] = code
	if id := h.Get(wire.HeaderRequestID); id != "" {
		body["requestId"] = id
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err == nil && ra >= 0 {
		body["retryAfter"] = ra
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Only an extension member can fail to encode: answer without them.
		for k := range ext {
			delete(body, k)
		}
		b, _ = json.Marshal(body)
	}
	h.Del("Content-Length")
	h.Set("Content-Type", ContentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
