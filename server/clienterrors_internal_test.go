package server

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// A driver's words, as pgx writes them while the database is cut off.
const driverWords = "failed to connect to `user=postgres database=test`: 127.0.0.1:5498 (127.0.0.1): dial error"

// Errors of the server's own condition are told by their code's generic message, whatever wraps
// them; client-caused errors by the coded error's own message, without wrappers or package names;
// a failing processor whose cause is the server's condition keeps what fails where but not the
// cause's words.
func TestClientMessagesWithholdTheServersOwnConditions(t *testing.T) {
	t.Parallel()
	unavailable := &foldtype.Error{Code: foldtype.CodeUnavailable, Message: "the database is unavailable; retry later: " + driverWords}
	next := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		err      error
		want     string
		withheld bool
	}{
		{"unavailable, wrapped", fmt.Errorf("stream store: begin: %w", unavailable), withheldMessages[foldtype.CodeUnavailable], true},
		{"disk full", &foldtype.Error{Code: foldtype.CodeInsufficientStorage, Message: "sqlite: disk I/O error"}, withheldMessages[foldtype.CodeInsufficientStorage], true},
		{"an uncoded error", errors.New(driverWords), withheldMessages[foldtype.CodeInternal], true},
		{"offset conflict, wrapped", fmt.Errorf("stream store: commit: %w", foldtype.OffsetConflictError(3, 5)), foldtype.OffsetConflictError(3, 5).Message, false},
		{"a package-named message", foldtype.NewError(foldtype.CodeCatchingUp, nil, "host: processor \"p\" on \"/a\" is catching up"), "processor \"p\" on \"/a\" is catching up", false},
		{"failing on the database", &foldtype.Error{Code: foldtype.CodeProcessorFailing, Message: "host: processor \"p\" on \"/a\" is failing at offset 4 (UNAVAILABLE: " + driverWords + ")",
			Data: map[string]any{"slug": "p", "path": "/a", "code": "UNAVAILABLE", "message": driverWords, "offset": int64(4), "nextRetry": next.Format(time.RFC3339Nano)}},
			"processor \"p\" on \"/a\" is failing at offset 4 (UNAVAILABLE: " + withheldMessages[foldtype.CodeUnavailable] + "); next retry at 2026-12-04T20:00:00Z", true},
		{"failing on its own error", &foldtype.Error{Code: foldtype.CodeProcessorFailing, Message: "host: processor \"p\" on \"/a\" is failing at offset 4 (PROCESS_EVENT_FAILED: boom)",
			Data: map[string]any{"code": "PROCESS_EVENT_FAILED", "message": "boom"}},
			"processor \"p\" on \"/a\" is failing at offset 4 (PROCESS_EVENT_FAILED: boom)", false},
	} {
		code := foldtype.CodeOf(c.err)
		if code == "" {
			code = foldtype.CodeInternal
		}
		got, withheld := clientMessage(code, c.err)
		if got != c.want || withheld != c.withheld {
			t.Errorf("%s: got %q withheld=%v, want %q withheld=%v", c.name, got, withheld, c.want, c.withheld)
		}
	}
}

// The stream information route's statuses carry a generic message for a failure of the server's
// own condition, and leave the reporter's statuses as they were.
func TestProcessorStatusesWithholdTheServersOwnConditions(t *testing.T) {
	t.Parallel()
	in := []foldtype.ProcessorStatus{
		{Slug: "a", Failing: &foldtype.ProcessorFailure{Code: foldtype.CodeProcessEventFailed, Message: "boom"}},
		{Slug: "b", Failing: &foldtype.ProcessorFailure{Code: foldtype.CodeUnavailable, Message: driverWords, Offset: 7},
			Parked: &foldtype.ProcessorError{Code: foldtype.CodeInternal, Message: driverWords}},
		{Slug: "c", WaitingForStore: &foldtype.ProcessorStoreWait{Write: "emit", Code: foldtype.CodeUnavailable, Message: driverWords, Attempts: 3}},
	}
	out := clientStatuses(in)
	if out[0].Failing.Message != "boom" {
		t.Errorf("a processor's own failure: %q, want it as reported", out[0].Failing.Message)
	}
	if out[1].Failing.Message != withheldMessages[foldtype.CodeUnavailable] || out[1].Failing.Offset != 7 ||
		out[1].Parked.Message != withheldMessages[foldtype.CodeInternal] {
		t.Errorf("a failure on the database: %+v %+v, want the generic messages", out[1].Failing, out[1].Parked)
	}
	if w := out[2].WaitingForStore; w.Message != withheldMessages[foldtype.CodeUnavailable] || w.Attempts != 3 || w.Write != "emit" {
		t.Errorf("a write waiting for the database: %+v, want the generic message and the rest as reported", w)
	}
	if in[1].Failing.Message != driverWords || in[2].WaitingForStore.Message != driverWords {
		t.Error("clientStatuses changed the reporter's statuses")
	}
}

// A request's own X-Request-Id is kept when it is sane; otherwise the server makes one, different
// for every request.
func TestRequestIDsAreTakenWhenSaneAndMadeOtherwise(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, in := range []string{"", "abc-123", strings.Repeat("x", 65), "a b", "ü", "id\r\nX-Evil: 1"} {
		r := httptest.NewRequest("GET", "/", nil)
		if in != "" {
			r.Header["X-Request-Id"] = []string{in}
		}
		id := requestID(r)
		if saneRequestID(in) != (id == in) {
			t.Errorf("incoming %q: id %q", in, id)
		}
		if !saneRequestID(id) || seen[id] {
			t.Errorf("incoming %q: id %q is not sane or not new", in, id)
		}
		seen[id] = true
	}
	if !seen["abc-123"] {
		t.Error("a sane incoming id was not kept")
	}
}
