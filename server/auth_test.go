package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// route is one request shape the server answers.
type route struct {
	name    string
	method  string
	path    string
	body    string
	headers []string
	write   bool
}

// everyRoute lists every route of a server with processors that touches data: each stream method
// and read mode, a fork, the reserved subscription path, each processor view, the stream listing
// and information (the console's static files hold no data).
func everyRoute() []route {
	js := []string{"Content-Type", "application/json"}
	return []route{
		{name: "create", method: "PUT", path: "/v1/stream/new", headers: js, write: true},
		{name: "fork", method: "PUT", path: "/v1/stream/fork", headers: []string{"Stream-Forked-From", "/v1/stream/events"}, write: true},
		{name: "append", method: "POST", path: "/v1/stream/events", body: `{"type":"note.added"}`, headers: js, write: true},
		{name: "close", method: "POST", path: "/v1/stream/other", headers: []string{"Stream-Closed", "true"}, write: true},
		{name: "delete", method: "DELETE", path: "/v1/stream/doomed", write: true},
		{name: "catch-up", method: "GET", path: "/v1/stream/events"},
		{name: "long-poll", method: "GET", path: "/v1/stream/events?offset=now&live=long-poll"},
		{name: "sse", method: "GET", path: "/v1/stream/events?offset=-1&live=sse"},
		{name: "head", method: "HEAD", path: "/v1/stream/events"},
		{name: "reserved", method: "GET", path: "/v1/stream/__ds/subscriptions"},
		{name: "subscription create", method: "PUT", path: "/v1/stream/__ds/subscriptions/s1", headers: js, write: true,
			body: `{"type":"pull-wake","pattern":"events/*","wake_stream":"other"}`},
		{name: "subscription read", method: "GET", path: "/v1/stream/__ds/subscriptions/s1"},
		{name: "subscription streams", method: "POST", path: "/v1/stream/__ds/subscriptions/s1/streams", headers: js, write: true,
			body: `{"streams":["events"]}`},
		{name: "subscription claim", method: "POST", path: "/v1/stream/__ds/subscriptions/s1/claim", headers: js, write: true,
			body: `{"worker":"w"}`},
		{name: "subscription delete", method: "DELETE", path: "/v1/stream/__ds/subscriptions/gone", write: true},
		{name: "signing keys", method: "GET", path: "/v1/stream/__ds/jwks.json"},
		{name: "snapshot", method: "GET", path: "/v1/processor/sources/events"},
		{name: "live view", method: "GET", path: "/v1/processor/sources/events?view=live"},
		{name: "wait", method: "GET", path: "/v1/processor/sources/events?waitUntilProcessed=0"},
		{name: "live-state sse", method: "GET", path: "/v1/processor/sources/events?live=sse"},
		{name: "stream list", method: "GET", path: server.ListPath},
		{name: "stream info", method: "GET", path: server.InfoPath + "?path=/events"},
	}
}

// prepare creates the streams the routes use.
func (s *secured) prepare(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/v1/stream/other", "/v1/stream/doomed"} {
		res, body := request(t, "PUT", s.url+p, "", "Content-Type", "text/plain", "Authorization", bearer(writerToken))
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", p, res.StatusCode, body)
		}
	}
}

// TestEveryRouteRefusesUnauthenticatedAndWrongScope: with bearer tokens configured, every route
// answers 401 UNAUTHORIZED (with a Bearer challenge) without a token, with an unknown token and
// with a malformed Authorization header; a read-scoped token gets 403 FORBIDDEN on every write
// route and through on every read route; the read-write token goes through everywhere.
func TestEveryRouteRefusesUnauthenticatedAndWrongScope(t *testing.T) {
	s := setupSecured(t, server.Config{SSEMaxDuration: 200 * time.Millisecond}, true)
	s.prepare(t)
	for _, rt := range everyRoute() {
		for _, auth := range []string{"", "Bearer wrong-token-0123456789abcdef", "Basic " + writerToken, "Bearer", "bearer  " + writerToken + " x", writerToken} {
			h := append([]string{}, rt.headers...)
			if auth != "" {
				h = append(h, "Authorization", auth)
			}
			res, body := request(t, rt.method, s.url+rt.path, rt.body, h...)
			wantCoded(t, rt.name+" with Authorization "+auth, res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
			if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s: 401 without a Bearer challenge", rt.name)
			}
		}
		res, body := request(t, rt.method, s.url+rt.path, rt.body, append(append([]string{}, rt.headers...), "Authorization", bearer(readerToken))...)
		if rt.write {
			wantCoded(t, rt.name+" with a read token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
		} else if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
			t.Fatalf("%s with a read token: %d %s", rt.name, res.StatusCode, body)
		}
	}
	// Nothing was written by the refused requests.
	res, body := request(t, "GET", s.url+"/v1/stream/events", "", "Authorization", bearer(readerToken))
	if res.StatusCode != http.StatusOK || strings.Contains(body, "note.added") {
		t.Fatalf("a refused append reached /events: %d %s", res.StatusCode, body)
	}
	for _, p := range []string{"/v1/stream/new", "/v1/stream/fork"} {
		if res, _ := request(t, "HEAD", s.url+p, "", "Authorization", bearer(readerToken)); res.StatusCode != http.StatusNotFound {
			t.Fatalf("a refused create made %s: %d", p, res.StatusCode)
		}
	}
	if res, _ := request(t, "HEAD", s.url+"/v1/stream/doomed", "", "Authorization", bearer(readerToken)); res.StatusCode != http.StatusOK {
		t.Fatalf("a refused delete removed /doomed: %d", res.StatusCode)
	}
	for _, rt := range everyRoute() {
		res, body := request(t, rt.method, s.url+rt.path, rt.body, append(append([]string{}, rt.headers...), "Authorization", "bEaReR "+writerToken)...)
		if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden || res.StatusCode >= 500 {
			t.Fatalf("%s with the read-write token: %d %s", rt.name, res.StatusCode, body)
		}
	}
}

// TestAuthorizeHookSeesOperationAndPath: an application's hook gets each request's operation and
// store path (a fork is also a read of its source), and its coded refusals reach the client.
func TestAuthorizeHookSeesOperationAndPath(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	tenant := func(r *http.Request, op server.Operation, path string) (*foldtype.Principal, error) {
		mu.Lock()
		seen = append(seen, string(op)+" "+path)
		mu.Unlock()
		if r.Header.Get("X-Tenant") == "" {
			return nil, foldtype.NewError(foldtype.CodeUnauthorized, nil, "who are you?")
		}
		if !strings.HasPrefix(path, "/"+r.Header.Get("X-Tenant")+"/") {
			return nil, foldtype.NewError(foldtype.CodeForbidden, nil, "not your tenant")
		}
		return &foldtype.Principal{Actor: r.Header.Get("X-Tenant")}, nil
	}
	s := setupSecured(t, server.Config{Authorize: tenant}, false)
	res, body := request(t, "PUT", s.url+"/v1/stream/a/log", "", "X-Tenant", "a", "Content-Type", "text/plain")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("own tenant: %d %s", res.StatusCode, body)
	}
	res, body = request(t, "GET", s.url+"/v1/stream/a/log", "")
	wantCoded(t, "no tenant", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
	res, body = request(t, "GET", s.url+"/v1/stream/a/log", "", "X-Tenant", "b")
	wantCoded(t, "other tenant's read", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	res, body = request(t, "PUT", s.url+"/v1/stream/b/copy", "", "X-Tenant", "b", "Stream-Forked-From", "/v1/stream/a/log")
	wantCoded(t, "fork of another tenant's stream", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	res, body = request(t, "DELETE", s.url+"/v1/stream/a/log", "", "X-Tenant", "a")
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	request(t, "GET", s.url+"/v1/processor/sources/a/log", "", "X-Tenant", "a")
	request(t, "POST", s.url+"/v1/stream/a/log", "x", "X-Tenant", "a", "Content-Type", "text/plain")
	want := []string{"create /a/log", "read /a/log", "read /a/log", "create /b/copy", "read /a/log", "delete /a/log", "processor-read /a/log", "append /a/log"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ", ") != strings.Join(want, ", ") {
		t.Fatalf("hook saw %q, want %q", seen, want)
	}
}

// TestParseBearerTokensRefusesWeakOrAmbiguousLists: short tokens, unknown scopes, repeated names
// or tokens, and an empty list are refused at start.
func TestParseBearerTokensRefusesWeakOrAmbiguousLists(t *testing.T) {
	for _, bad := range []string{
		"",
		"# only a comment\n",
		"alice read-write short",
		"alice admin " + writerToken,
		"alice read-write " + writerToken + "\nalice read " + readerToken,
		"alice read-write " + writerToken + "\nbob read " + writerToken,
		"al ice read " + readerToken,
		"alice read-write " + writerToken + " extra",
		"alice read-write tok/en*0123456789abcdef",
	} {
		if _, err := server.ParseBearerTokens(bad); err == nil {
			t.Errorf("ParseBearerTokens(%q) accepted", bad)
		}
	}
	bt, err := server.ParseBearerTokens("# tokens\nalice read-write " + writerToken + " ; bob read " + readerToken + "\n\n")
	if err != nil || bt.Len() != 2 {
		t.Fatalf("valid list: %v, %d tokens", err, bt.Len())
	}
}

// BenchmarkBearerTokensAuthorize measures the built-in hook's cost per request (aim: ≤ 1 µs).
func BenchmarkBearerTokensAuthorize(b *testing.B) {
	var list strings.Builder
	list.WriteString(testTokens)
	for i := range 8 {
		list.WriteString("svc" + string(rune('a'+i)) + " read svc-token-0123456789abcdef-" + string(rune('a'+i)) + "\n")
	}
	bt, err := server.ParseBearerTokens(list.String())
	if err != nil {
		b.Fatal(err)
	}
	r, _ := http.NewRequest("POST", "http://127.0.0.1/v1/stream/x", nil)
	r.Header.Set("Authorization", bearer("svc-token-0123456789abcdef-h"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.Authorize(r, server.OpRead, "/x"); err != nil {
			b.Fatal(err)
		}
	}
}
