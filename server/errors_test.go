package server_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/server"
)

// TestErrorAnswersCarryTheirCode: every refusal of the store reaches the client with the status
// of the code table and the code itself in Foldstream-Error-Code, and a stream closed by its
// writer is told apart from a server shutting down.
func TestErrorAnswersCarryTheirCode(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{})
	text := map[string]string{"Content-Type": "text/plain"}
	e.do(t, "PUT", "/v1/stream/c", text, "ab")
	e.do(t, "POST", "/v1/stream/c", map[string]string{"Stream-Closed": "true"}, "")

	cases := []struct {
		what, method, path string
		headers            map[string]string
		body               string
		status             int
		code               string
	}{
		{"missing stream", "GET", "/v1/stream/nope", nil, "", 404, "STREAM_NOT_FOUND"},
		{"closed by its writer", "POST", "/v1/stream/c", text, "x", 409, "STREAM_CLOSED"},
		{"content type mismatch", "PUT", "/v1/stream/c", map[string]string{"Content-Type": "application/json"}, "", 409, "CONFLICT"},
		{"invalid stream name", "PUT", "/v1/stream/bad%00name", text, "", 400, "INVALID_STREAM_NAME"},
	}
	for _, tc := range cases {
		res, _ := e.do(t, tc.method, tc.path, tc.headers, tc.body)
		wantStatus(t, tc.what, res, tc.status)
		wantHeader(t, tc.what, res, server.HeaderErrorCode, tc.code)
	}
	res, _ := e.do(t, "POST", "/v1/stream/c", text, "x")
	wantHeader(t, "closed by its writer", res, "Stream-Closed", "true")
	wantHeader(t, "closed by its writer", res, "Stream-Next-Offset", off(2))

	e.st.Close(context.Background())
	res, _ = e.do(t, "GET", "/v1/stream/c", nil, "")
	wantStatus(t, "store shut down", res, 503)
	wantHeader(t, "store shut down", res, server.HeaderErrorCode, "CLOSED")
	wantHeader(t, "store shut down", res, "Retry-After", "1")
}
