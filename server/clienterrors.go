package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// What a client is told of an error (docs/server.md#errors). The one rule: an error a client
// caused (a bad offset, a conflict, a missing stream) is answered with its coded message, which
// is written for the client; an error of the server's own condition (its database unreachable or
// full, a fault, a shutdown) is answered with its code and a generic message, because its text
// is the driver's (the database's address, user and name, the Go packages on the way), and the
// detail goes to the server's log under the answer's X-Request-Id.

// withheldMessages are the generic messages of the codes that report the server's own condition:
// their errors' text is never sent.
var withheldMessages = map[foldtype.Code]string{
	foldtype.CodeUnavailable:         "the store cannot be reached right now; retry later",
	foldtype.CodeInsufficientStorage: "the store is out of space: nothing was written; retry later",
	foldtype.CodeInternal:            "internal error",
	foldtype.CodeClosed:              "server is shutting down",
	foldtype.CodeCommitOutcomeUnknown: "the database did not confirm the write's commit in time: it may or may not be written; " +
		"retry it only if it is idempotent (a producer's batch, an idempotency key)",
}

// withheld reports whether errors with code are answered with a generic message.
func withheld(code foldtype.Code) bool {
	_, ok := withheldMessages[code]
	return ok
}

// clientMessage returns the message a client is told for err, whose code is code, and whether it
// withheld err's own text (the caller logs that under the request id). A client-caused error is
// told by the message of the coded error itself: the words of wrappers on the way ("stream store:
// begin: …") name the server's code path, not the request.
func clientMessage(code foldtype.Code, err error) (string, bool) {
	if msg, ok := withheldMessages[code]; ok {
		return msg, true
	}
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		return withheldMessages[foldtype.CodeInternal], true
	}
	if fe.Code == foldtype.CodeProcessorFailing {
		if cause, _ := fe.Data["code"].(string); withheld(foldtype.Code(cause)) {
			return failingMessage(fe.Data, foldtype.Code(cause)), true
		}
	}
	return trimPackage(fe.Error()), false
}

// failingMessage is a failing processor's message with its cause withheld: what fails where, and
// the cause's code and generic message.
func failingMessage(data map[string]any, cause foldtype.Code) string {
	slug, _ := data["slug"].(string)
	path, _ := data["path"].(string)
	off, _ := dataOffset(data)
	msg := fmt.Sprintf("processor %q on %q is failing at offset %d (%s: %s)", slug, path, off, cause, withheldMessages[cause])
	if at, ok := data["nextRetry"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			msg += "; next retry at " + t.UTC().Format(time.RFC3339)
		}
	}
	return msg
}

// trimPackage drops the Go package names (and the operations named like them) coded messages
// start with ("host: processor …", "append: event 2 …"), however many: a client is told what
// happened, not where in the server's code (docs/server.md#errors).
func trimPackage(msg string) string {
	for {
		cut := false
		for _, p := range packagePrefixes {
			if rest, ok := strings.CutPrefix(msg, p); ok {
				msg, cut = rest, true
			}
		}
		if !cut {
			return msg
		}
	}
}

// packagePrefixes are the prefixes trimPackage drops.
var packagePrefixes = [...]string{"host: ", "stream store: ", "stream: ", "server: ", "append: ", "engine: ",
	"processor: ", "contract: ", "foldstream: "}

// clientStatuses returns the processor statuses as a client sees them: a failure or a stop whose
// code reports the server's own condition carries the code's generic message. The statuses are
// copied only when one changes.
func clientStatuses(in []foldtype.ProcessorStatus) []foldtype.ProcessorStatus {
	out := in
	for i, st := range in {
		fail := st.Failing != nil && withheld(st.Failing.Code)
		parked := st.Parked != nil && withheld(st.Parked.Code)
		work := st.WorkFailed != nil && withheld(st.WorkFailed.Code)
		wait := st.WaitingForStore != nil && withheld(st.WaitingForStore.Code)
		if !fail && !parked && !work && !wait {
			continue
		}
		if &out[0] == &in[0] {
			out = append([]foldtype.ProcessorStatus(nil), in...)
		}
		if fail {
			f := *st.Failing
			f.Message = withheldMessages[f.Code]
			out[i].Failing = &f
		}
		if parked {
			out[i].Parked = &foldtype.ProcessorError{Code: st.Parked.Code, Message: withheldMessages[st.Parked.Code]}
		}
		if work {
			out[i].WorkFailed = &foldtype.ProcessorError{Code: st.WorkFailed.Code, Message: withheldMessages[st.WorkFailed.Code]}
		}
		if wait {
			w := *st.WaitingForStore
			w.Message = withheldMessages[w.Code]
			out[i].WaitingForStore = &w
		}
	}
	return out
}

// logWithheld logs what an answer withheld: the request, its id and the error in full.
// A shutdown's refusals are not logged: their text is the generic one.
func (s *Server) logWithheld(w http.ResponseWriter, r *http.Request, code foldtype.Code, err error) {
	if code == foldtype.CodeClosed {
		return
	}
	level := slog.LevelWarn
	if code == foldtype.CodeInternal || code == "" {
		level = slog.LevelError
	}
	s.log.Log(r.Context(), level, "request failed", "requestId", w.Header().Get(HeaderRequestID),
		"method", r.Method, "path", r.URL.Path, "code", string(code), "err", err)
}

// requestIDPrefix makes this process's request ids unlike another's; requestIDSeq numbers them.
var (
	requestIDPrefix = func() string {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}()
	requestIDSeq atomic.Uint64
)

// maxRequestIDBytes bounds a request id taken from a request.
const maxRequestIDBytes = 64

// RequestID returns the X-Request-Id the server gives r's answer: r's own when that is sane (1 to
// 64 ASCII letters, digits and ".-_:"), so a caller's id follows the request into the log, else a
// new one. A program that answers requests in front of the server (while its store opens, say)
// uses it so that its answers carry an id like the server's.
func RequestID(r *http.Request) string { return requestID(r) }

// requestID is RequestID.
func requestID(r *http.Request) string {
	if v := r.Header[HeaderRequestID]; len(v) == 1 && saneRequestID(v[0]) {
		return v[0]
	}
	return newRequestID()
}

// newRequestID makes a request id: this process's prefix and the next number.
func newRequestID() string {
	var buf [32]byte
	b := append(buf[:0], requestIDPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, requestIDSeq.Add(1), 36)
	return string(b)
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return false
		}
	}
	return true
}
