package server_test

import (
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// Every error answer of every route carries its code in Foldstream-Error-Code and an RFC 9457
// problem body (wantProblem): the protocol's stream routes, catch-up and SSE reads, the listing
// and stream information, the console's files, the processor routes and the server's own
// refusals (docs/server.md#errors).
func TestEveryErrorAnswerCarriesItsCode(t *testing.T) {
	s := setupSecured(t, server.Config{}, true)
	base := s.url
	auth := []string{"Authorization", bearer(writerToken)}
	must := func(method, path, body string, headers ...string) {
		t.Helper()
		res, b := request(t, method, base+path, body, append(append([]string(nil), auth...), headers...)...)
		if res.StatusCode >= 300 {
			t.Fatalf("setup %s %s: %d %s", method, path, res.StatusCode, b)
		}
	}
	must("PUT", "/v1/stream/orders", "", "Content-Type", "application/json")
	must("POST", "/v1/stream/orders", `{"n":1}`, "Content-Type", "application/json", "Stream-Seq", "m")
	must("PUT", "/v1/stream/done", "", "Content-Type", "text/plain", "Stream-Closed", "true")

	type tc struct {
		name, method, path, body string
		headers                  []string
		noAuth                   bool
		status                   int
		code                     foldtype.Code // "" checks only that some code is there
	}
	ct := func(v string) []string { return []string{"Content-Type", v} }
	cases := []tc{
		// Server's own refusals.
		{name: "no route", method: "GET", path: "/nowhere", status: 404, code: foldtype.CodeNoRoute},
		{name: "method not allowed", method: "PATCH", path: "/v1/stream/orders", status: 405, code: foldtype.CodeMethodNotAllowed},
		{name: "no stream name", method: "GET", path: "/v1/stream/", status: 404, code: foldtype.CodeNoRoute},
		{name: "reserved path", method: "GET", path: "/v1/stream/__ds/x"},
		{name: "key set by POST", method: "POST", path: "/v1/stream/__ds/jwks.json"},
		{name: "unknown subscription route", method: "GET", path: "/v1/stream/__ds/subscriptions/s1/nothing"},
		{name: "no token", method: "GET", path: "/v1/stream/orders", noAuth: true, status: 401, code: foldtype.CodeUnauthorized},
		{name: "read token writes", method: "POST", path: "/v1/stream/orders", body: `{"n":2}`, noAuth: true,
			headers: []string{"Authorization", bearer(readerToken), "Content-Type", "application/json"}, status: 403, code: foldtype.CodeForbidden},
		// Create.
		{name: "malformed TTL", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-TTL", "soon"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "malformed expiry", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Expires-At", "tomorrow"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "expiry in the past", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Expires-At", "2000-01-01T00:00:00Z"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "TTL and expiry", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-TTL", "60", "Stream-Expires-At", "2999-01-01T00:00:00Z"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "empty fork source", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", " "}, status: 400},
		{name: "fork offset alone", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Fork-Offset", "-1"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "malformed fork offset", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", "/v1/stream/orders", "Stream-Fork-Offset", "zz"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "malformed fork sub-offset", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", "/v1/stream/orders", "Stream-Fork-Sub-Offset", "-3"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "fork sub-offset without offset", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", "/v1/stream/orders", "Stream-Fork-Sub-Offset", "1"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "fork of a missing stream", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", "/v1/stream/missing"}, status: 404, code: foldtype.CodeStreamNotFound},
		{name: "fork past the tail", method: "PUT", path: "/v1/stream/x", headers: []string{"Stream-Forked-From", "/v1/stream/orders", "Stream-Fork-Offset", "0000000000000000_0000000000000099"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "content type conflict", method: "PUT", path: "/v1/stream/orders", headers: ct("text/plain"), status: 409, code: foldtype.CodeConflict},
		{name: "bad stream name", method: "PUT", path: "/v1/stream/a%00b", status: 400},
		// Append.
		{name: "append to a missing stream", method: "POST", path: "/v1/stream/missing", body: "{}", headers: ct("application/json"), status: 404, code: foldtype.CodeStreamNotFound},
		{name: "append to a closed stream", method: "POST", path: "/v1/stream/done", body: "x", headers: ct("text/plain"), status: 409, code: foldtype.CodeStreamClosed},
		{name: "partial producer headers", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Producer-Id", "p"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "empty producer id", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Producer-Id", " ", "Producer-Epoch", "0", "Producer-Seq", "0"}, status: 400},
		{name: "malformed producer epoch", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Producer-Id", "p", "Producer-Epoch", "x", "Producer-Seq", "0"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "malformed expected offset", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Foldstream-Expected-Offset", "soon"}, status: 400, code: foldtype.CodeBadRequest},
		{name: "stale expected offset", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Foldstream-Expected-Offset", "-1"}, status: 409, code: foldtype.CodeOffsetConflict},
		{name: "empty body", method: "POST", path: "/v1/stream/orders", headers: ct("application/json"), status: 400, code: foldtype.CodeBadRequest},
		{name: "body without content type", method: "POST", path: "/v1/stream/orders", body: "{}", status: 400, code: foldtype.CodeBadRequest},
		{name: "wrong content type", method: "POST", path: "/v1/stream/orders", body: "x", headers: ct("text/plain"), status: 409, code: foldtype.CodeConflict},
		{name: "malformed JSON", method: "POST", path: "/v1/stream/orders", body: "{", headers: ct("application/json"), status: 400, code: foldtype.CodeBadRequest},
		{name: "Stream-Seq regression", method: "POST", path: "/v1/stream/orders", body: "{}", headers: []string{"Content-Type", "application/json", "Stream-Seq", "b"}, status: 409, code: foldtype.CodeConflict},
		// Reads: catch-up, long-poll, SSE.
		{name: "read a missing stream", method: "GET", path: "/v1/stream/missing", status: 404, code: foldtype.CodeStreamNotFound},
		{name: "head a missing stream", method: "HEAD", path: "/v1/stream/missing", status: 404, code: foldtype.CodeStreamNotFound},
		{name: "malformed offset", method: "GET", path: "/v1/stream/orders?offset=soon", status: 400, code: foldtype.CodeBadRequest},
		{name: "unknown live mode", method: "GET", path: "/v1/stream/orders?offset=-1&live=always", status: 400, code: foldtype.CodeBadRequest},
		{name: "long-poll without offset", method: "GET", path: "/v1/stream/orders?live=long-poll", status: 400, code: foldtype.CodeBadRequest},
		{name: "SSE with a malformed offset", method: "GET", path: "/v1/stream/orders?offset=soon&live=sse", status: 400, code: foldtype.CodeBadRequest},
		{name: "SSE of a missing stream", method: "GET", path: "/v1/stream/missing?offset=-1&live=sse", status: 404, code: foldtype.CodeStreamNotFound},
		{name: "malformed query", method: "GET", path: "/v1/stream/orders?offset=%zz", status: 400, code: foldtype.CodeBadRequest},
		// Delete.
		{name: "delete a missing stream", method: "DELETE", path: "/v1/stream/missing", status: 404, code: foldtype.CodeStreamNotFound},
		// Listing, stream information, console files.
		{name: "list with a bad limit", method: "GET", path: "/v1/streams?limit=0", status: 400, code: foldtype.CodeBadRequest},
		{name: "list with a malformed query", method: "GET", path: "/v1/streams?prefix=%zz", status: 400, code: foldtype.CodeBadRequest},
		{name: "list by POST", method: "POST", path: "/v1/streams", status: 405, code: foldtype.CodeMethodNotAllowed},
		{name: "info without path", method: "GET", path: "/v1/streams/info", status: 400, code: foldtype.CodeBadRequest},
		{name: "info with a malformed query", method: "GET", path: "/v1/streams/info?path=%zz", status: 400, code: foldtype.CodeBadRequest},
		{name: "info of a missing stream", method: "GET", path: "/v1/streams/info?path=/missing", status: 404, code: foldtype.CodeStreamNotFound},
		{name: "missing console file", method: "GET", path: "/console/nothing.js", status: 404, code: foldtype.CodeNoRoute},
		// Processor routes.
		{name: "processor by POST", method: "POST", path: "/v1/processor/sources/events", status: 405, code: foldtype.CodeMethodNotAllowed},
		{name: "processor verb for a read-write token", method: "POST", path: "/v1/processor/sources/events?op=retry", status: 403, code: foldtype.CodeForbidden},
		{name: "processor without stream", method: "GET", path: "/v1/processor/sources", status: 404, code: foldtype.CodeNoRoute},
		{name: "processor with a malformed query", method: "GET", path: "/v1/processor/sources/events?view=%zz", status: 400, code: foldtype.CodeBadRequest},
		{name: "processor with a malformed offset", method: "GET", path: "/v1/processor/sources/events?waitUntilProcessed=soon", status: 400, code: foldtype.CodeBadRequest},
		{name: "processor with a bad timeout", method: "GET", path: "/v1/processor/sources/events?waitUntilProcessed=0&timeout=year", status: 400, code: foldtype.CodeBadRequest},
		{name: "processor with a bad view", method: "GET", path: "/v1/processor/sources/events?view=all", status: 400, code: foldtype.CodeBadRequest},
		{name: "unknown processor", method: "GET", path: "/v1/processor/nobody/events"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			h := c.headers
			if !c.noAuth {
				h = append(append([]string(nil), auth...), h...)
			}
			res, body := request(t, c.method, base+c.path, c.body, h...)
			if res.StatusCode < 400 {
				t.Fatalf("%s %s: %d %s; want an error answer", c.method, c.path, res.StatusCode, body)
			}
			got := res.Header.Get(server.HeaderErrorCode)
			if got == "" {
				t.Errorf("%s %s: %d %q with no %s", c.method, c.path, res.StatusCode, strings.TrimSpace(body), server.HeaderErrorCode)
			}
			if c.status != 0 && res.StatusCode != c.status {
				t.Errorf("%s %s: status %d (%s), want %d", c.method, c.path, res.StatusCode, strings.TrimSpace(body), c.status)
			}
			if c.code != "" && got != string(c.code) {
				t.Errorf("%s %s: code %q (%s), want %s", c.method, c.path, got, strings.TrimSpace(body), c.code)
			}
			wantProblem(t, c.method+" "+c.path, res, body)
		})
	}
}
