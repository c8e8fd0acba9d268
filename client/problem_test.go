package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// answering is an HTTP client whose every request is answered status with header and body.
func answering(status int, header http.Header, body []byte) *http.Client {
	return &http.Client{Transport: rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: header.Clone(), Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
	})}
}

// A problem body (application/problem+json) is decoded into client.Error: the detail is the
// message, and the violations, limit, retry delay, failure and every member are there; a body of
// another type stays the message.
func TestTheClientDecodesProblemBodies(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"https://foldstream.dev/errors/INVALID_EVENT","title":"Invalid event","status":400,` +
		`"detail":"2 schema violation(s) in the batch","code":"INVALID_EVENT","requestId":"abc-1",` +
		`"violations":[{"index":1,"pointer":"/payload/qty","message":"must be >= 1 but found 0"},` +
		`{"index":3,"pointer":"/payload","message":"missing properties: 'sku'"}],"violationsTotal":2,"stream":"/orders/o1"}`)
	h := http.Header{"Content-Type": {"application/problem+json"}, "Foldstream-Error-Code": {"INVALID_EVENT"}, "X-Request-Id": {"abc-1"}}
	s, err := client.NewStream("http://127.0.0.1:1/v1/stream/orders/o1", client.Config{HTTPClient: answering(400, h, body)})
	if err != nil {
		t.Fatal(err)
	}
	s.SetContentType("application/json")
	_, err = s.Append(context.Background(), []byte(`{"type":"line.added"}`))
	ce, ok := errors.AsType[*client.Error](err)
	if !ok || !errors.Is(err, client.ErrInvalidEvent) {
		t.Fatalf("append: %v, want a *client.Error INVALID_EVENT", err)
	}
	if ce.Message != "2 schema violation(s) in the batch" || ce.Detail != ce.Message || ce.Title != "Invalid event" ||
		ce.Type != "https://foldstream.dev/errors/INVALID_EVENT" || ce.RequestID != "abc-1" {
		t.Errorf("decoded %+v", ce)
	}
	want := []client.Violation{{Index: 1, Pointer: "/payload/qty", Message: "must be >= 1 but found 0"},
		{Index: 3, Pointer: "/payload", Message: "missing properties: 'sku'"}}
	if len(ce.Violations) != 2 || ce.Violations[0] != want[0] || ce.Violations[1] != want[1] || ce.ViolationsTotal != 2 {
		t.Errorf("violations %+v (total %d), want %+v", ce.Violations, ce.ViolationsTotal, want)
	}
	if string(ce.Members["stream"]) != `"/orders/o1"` {
		t.Errorf("members %v, want the stream member kept", ce.Members)
	}
	if strings.Contains(ce.Error(), "{") {
		t.Errorf("Error() shows the JSON body: %s", ce.Error())
	}

	tooLarge := []byte(`{"type":"https://foldstream.dev/errors/TOO_LARGE","title":"Too large","status":413,"detail":"request body too large: at most 1000 bytes","code":"TOO_LARGE","limit":1000,"limitUnit":"bytes"}`)
	s2, _ := client.NewStream("http://127.0.0.1:1/s", client.Config{HTTPClient: answering(413, http.Header{"Content-Type": {"application/problem+json; charset=utf-8"}}, tooLarge)})
	s2.SetContentType("application/json")
	_, err = s2.Append(context.Background(), []byte(`{}`))
	if ce, ok := errors.AsType[*client.Error](err); !ok || ce.Code != client.CodeTooLarge || ce.Limit != 1000 || ce.LimitUnit != "bytes" {
		t.Errorf("413: %#v, want TOO_LARGE with limit 1000 bytes (the code from the body, as no header names it)", err)
	}

	plain := []byte("no such thing\n")
	s3, _ := client.NewStream("http://127.0.0.1:1/s", client.Config{HTTPClient: answering(404, http.Header{"Content-Type": {"text/plain"}}, plain)})
	if _, err := s3.Head(context.Background()); err == nil {
		t.Fatal("head: no error")
	} else if ce, ok := errors.AsType[*client.Error](err); !ok || ce.Message != "" && ce.Message != "no such thing" || ce.Detail != "" {
		t.Errorf("plain-text 404: %#v", err)
	}
}

// Against foldstream's own server, a refusal arrives decoded: the code, the detail as the message
// (never the JSON text) and the request id.
func TestTheClientDecodesAServersRefusal(t *testing.T) {
	t.Parallel()
	base := testserver.Start(t)
	s, err := client.NewStream(base+"/v1/stream/nowhere", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(context.Background(), []byte("x"))
	ce, ok := errors.AsType[*client.Error](err)
	if !ok || ce.Code != client.CodeStreamNotFound || ce.Detail == "" || ce.Message != ce.Detail || ce.RequestID == "" ||
		ce.Type != "https://foldstream.dev/errors/STREAM_NOT_FOUND" || strings.Contains(ce.Message, "{") {
		t.Fatalf("append to a missing stream: %#v", err)
	}
}

// FuzzProblemDecoding feeds arbitrary bodies as problem answers: the client never panics, always
// returns a coded error for the status, and keeps the message one short, valid line's worth.
func FuzzProblemDecoding(f *testing.F) {
	f.Add([]byte(`{"type":"https://foldstream.dev/errors/INVALID_EVENT","title":"Invalid event","status":400,"detail":"d","code":"INVALID_EVENT","violations":[{"index":1,"pointer":"/payload/qty","message":"m"}]}`), 400)
	f.Add([]byte(`{"detail":7,"code":["x"],"retryAfter":"soon","violations":{}}`), 503)
	f.Add([]byte(`{"retryAfter":1e300,"limit":-5,"failure":{"offset":"x"}}`), 413)
	f.Add([]byte(`[1,2]`), 409)
	f.Add([]byte(`null`), 500)
	f.Add([]byte("{\"detail\":\"\xff\xfe\"}"), 400)
	f.Fuzz(func(t *testing.T, body []byte, status int) {
		if status < 400 || status > 599 {
			status = 400 + (status%200+200)%200
		}
		h := http.Header{"Content-Type": {"application/problem+json"}}
		s, err := client.NewStream("http://127.0.0.1:1/s", client.Config{HTTPClient: answering(status, h, body),
			Retry: client.RetryPolicy{MaxAttempts: 1, InitialDelay: time.Microsecond}})
		if err != nil {
			t.Fatal(err)
		}
		s.SetContentType("application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = s.Append(ctx, []byte(`{}`))
		if err == nil {
			t.Fatalf("status %d: no error", status)
		}
		if client.CodeOf(err) == "" {
			t.Fatalf("status %d: an error without a code: %v", status, err)
		}
		if ce, ok := errors.AsType[*client.Error](err); ok {
			if ce.RetryAfter < 0 || ce.ViolationsTotal < len(ce.Violations) {
				t.Fatalf("decoded %+v", ce)
			}
			if !utf8.ValidString(ce.Error()) && utf8.Valid(body) {
				t.Fatalf("Error() is not valid UTF-8: %q", ce.Error())
			}
		}
	})
}
