package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
	pattern string // the server's pattern for it (server.Route.Pattern)
	path    string
	body    string
	headers []string
	write   bool
	// wake marks a wake's callback, ack or release: its bearer is the wake's own token, so every
	// API token, of either scope, is refused 401 there.
	wake bool
	// ops marks an operator's verb: only an ops token may send it, so the read and the read-write
	// tokens are both refused 403.
	ops bool
}

// everyRoute lists every route of a server with processors and metrics that touches data, in an
// order in which the read-write token's requests all go through: each stream method and read
// mode, a fork, the reserved paths, every subscription route, each processor view, the stream
// listing and information, the metrics. TestEveryRouteIsInTheAuthTestsList keeps it complete.
func everyRoute() []route {
	js := []string{"Content-Type", "application/json"}
	const stream, subs, proc = "/v1/stream/{stream}", "/v1/stream/__ds/subscriptions/{id}", "/v1/processor/{slug}/{stream}"
	wakeBody := `{"wake_id":"w-1","generation":1,"acks":[]}`
	return []route{
		{name: "create", method: "PUT", pattern: stream, path: "/v1/stream/new", headers: js, write: true},
		{name: "fork", method: "PUT", pattern: stream, path: "/v1/stream/fork", headers: []string{"Stream-Forked-From", "/v1/stream/events"}, write: true},
		{name: "append", method: "POST", pattern: stream, path: "/v1/stream/events", body: `{"type":"note.added"}`, headers: js, write: true},
		{name: "close", method: "POST", pattern: stream, path: "/v1/stream/other", headers: []string{"Stream-Closed", "true"}, write: true},
		{name: "delete", method: "DELETE", pattern: stream, path: "/v1/stream/doomed", write: true},
		{name: "catch-up", method: "GET", pattern: stream, path: "/v1/stream/events"},
		{name: "long-poll", method: "GET", pattern: stream, path: "/v1/stream/events?offset=now&live=long-poll"},
		{name: "sse", method: "GET", pattern: stream, path: "/v1/stream/events?offset=-1&live=sse"},
		{name: "head", method: "HEAD", pattern: stream, path: "/v1/stream/events"},
		{name: "reserved", method: "GET", pattern: stream, path: "/v1/stream/__ds/subscriptions"},
		{name: "subscription create", method: "PUT", pattern: subs, path: "/v1/stream/__ds/subscriptions/s1", headers: js, write: true,
			body: `{"type":"pull-wake","pattern":"events/*","wake_stream":"other"}`},
		{name: "subscription read", method: "GET", pattern: subs, path: "/v1/stream/__ds/subscriptions/s1"},
		{name: "subscription streams", method: "POST", pattern: subs + "/streams", path: "/v1/stream/__ds/subscriptions/s1/streams", headers: js, write: true,
			body: `{"streams":["events"]}`},
		{name: "subscription stream remove", method: "DELETE", pattern: subs + "/streams/{name}", path: "/v1/stream/__ds/subscriptions/s1/streams/events", write: true},
		{name: "subscription claim", method: "POST", pattern: subs + "/claim", path: "/v1/stream/__ds/subscriptions/s1/claim", headers: js, write: true,
			body: `{"worker":"w"}`},
		{name: "subscription delete", method: "DELETE", pattern: subs, path: "/v1/stream/__ds/subscriptions/gone", write: true},
		{name: "webhook callback", method: "POST", pattern: subs + "/callback", path: "/v1/stream/__ds/subscriptions/hook/callback", headers: js, body: wakeBody, wake: true},
		{name: "pull-wake ack", method: "POST", pattern: subs + "/ack", path: "/v1/stream/__ds/subscriptions/pool/ack", headers: js, body: wakeBody, wake: true},
		{name: "pull-wake release", method: "POST", pattern: subs + "/release", path: "/v1/stream/__ds/subscriptions/pool/release", headers: js, body: wakeBody, wake: true},
		{name: "signing keys", method: "GET", pattern: "/v1/stream/__ds/jwks.json", path: "/v1/stream/__ds/jwks.json"},
		{name: "signing keys head", method: "HEAD", pattern: "/v1/stream/__ds/jwks.json", path: "/v1/stream/__ds/jwks.json"},
		{name: "snapshot", method: "GET", pattern: proc, path: "/v1/processor/sources/events"},
		{name: "snapshot head", method: "HEAD", pattern: proc, path: "/v1/processor/sources/events"},
		{name: "live view", method: "GET", pattern: proc, path: "/v1/processor/sources/events?view=live"},
		{name: "wait", method: "GET", pattern: proc, path: "/v1/processor/sources/events?waitUntilProcessed=0"},
		{name: "live-state sse", method: "GET", pattern: proc, path: "/v1/processor/sources/events?live=sse"},
		{name: "operator verb", method: "POST", pattern: proc + "?op={op}", path: "/v1/processor/sources/events?op=retry", write: true, ops: true},
		{name: "bulk verb", method: "POST", pattern: "/v1/processor/{slug}/?op={op}&pattern={pattern}", path: "/v1/processor/sources/?op=pause&pattern=/events&dryRun=1", write: true, ops: true},
		{name: "processor audit", method: "GET", pattern: proc + "?audit=1", path: "/v1/processor/sources/events?audit=1", write: true, ops: true},
		{name: "processor audit head", method: "HEAD", pattern: proc + "?audit=1", path: "/v1/processor/sources/events?audit=1", write: true, ops: true},
		{name: "parked events", method: "GET", pattern: proc + "?parked=1", path: "/v1/processor/sources/events?parked=1", write: true, ops: true},
		{name: "parked events head", method: "HEAD", pattern: proc + "?parked=1", path: "/v1/processor/sources/events?parked=1", write: true, ops: true},
		{name: "stream list", method: "GET", pattern: server.ListPath, path: server.ListPath},
		{name: "stream list head", method: "HEAD", pattern: server.ListPath, path: server.ListPath},
		{name: "processor list", method: "GET", pattern: server.ProcessorsPath, path: server.ProcessorsPath + "?state=failing"},
		{name: "processor list head", method: "HEAD", pattern: server.ProcessorsPath, path: server.ProcessorsPath},
		{name: "stream info", method: "GET", pattern: server.InfoPath, path: server.InfoPath + "?path=/events"},
		{name: "stream info head", method: "HEAD", pattern: server.InfoPath, path: server.InfoPath + "?path=/events"},
		{name: "metrics", method: "GET", pattern: server.MetricsPath, path: server.MetricsPath},
		{name: "metrics head", method: "HEAD", pattern: server.MetricsPath, path: server.MetricsPath},
	}
}

// publicRoutes are the routes that need no credentials (health probes).
var publicRoutes = []string{server.HealthPath, server.ReadyPath}

// setupRoutes starts the server every route of everyRoute is sent to: bearer tokens, processors,
// metrics, loopback webhooks.
func setupRoutes(t *testing.T) *secured {
	t.Helper()
	s := setupSecured(t, server.Config{SSEMaxDuration: 200 * time.Millisecond, Metrics: server.NewMetrics(), AllowLoopbackWebhooks: true}, true)
	s.prepare(t)
	return s
}

// prepare creates the streams and the subscriptions the routes use.
func (s *secured) prepare(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/v1/stream/other", "/v1/stream/doomed", "/v1/stream/wake"} {
		res, body := request(t, "PUT", s.url+p, "", "Content-Type", "text/plain", "Authorization", bearer(writerToken))
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", p, res.StatusCode, body)
		}
	}
	for id, cfg := range map[string]string{
		"pool": `{"type":"pull-wake","pattern":"work/*","wake_stream":"wake"}`,
		"hook": `{"type":"webhook","pattern":"hooked/*","webhook":{"url":"http://127.0.0.1:9/hook"}}`,
	} {
		res, body := request(t, "PUT", s.url+"/v1/stream/__ds/subscriptions/"+id, cfg, "Content-Type", "application/json", "Authorization", bearer(writerToken))
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create subscription %s: %d %s", id, res.StatusCode, body)
		}
	}
}

// TestEveryRouteIsInTheAuthTestsList: every route the server serves (from its own routing tables)
// is in everyRoute, with the right kind (write, wake, read), or is a public health route; a route
// added to the server without a case in the auth tests fails here.
func TestEveryRouteIsInTheAuthTestsList(t *testing.T) {
	s := setupRoutes(t)
	listed := map[string][]route{}
	for _, rt := range everyRoute() {
		listed[rt.method+" "+rt.pattern] = append(listed[rt.method+" "+rt.pattern], rt)
	}
	served := map[string]bool{}
	for _, r := range s.srv.Routes() {
		key := r.Method + " " + r.Pattern
		served[key] = true
		if r.Op == "" {
			if !slices.Contains(publicRoutes, r.Pattern) {
				t.Errorf("route %s needs no credentials and is not a health route", key)
			}
			continue
		}
		rts := listed[key]
		if len(rts) == 0 {
			t.Errorf("route %s (operation %s) is not in everyRoute: add a case for it", key, r.Op)
			continue
		}
		for _, rt := range rts {
			if rt.wake != (r.Op == server.OpWake) || rt.ops != (r.Op == server.OpProcessorOps) || (!rt.wake && rt.write != r.Op.Writes()) {
				t.Errorf("everyRoute's %q (write %v, wake %v) does not match the server's operation %s for %s", rt.name, rt.write, rt.wake, r.Op, key)
			}
		}
	}
	for key := range listed {
		if !served[key] {
			t.Errorf("everyRoute lists %s, which the server does not serve", key)
		}
	}
	// The health routes answer without credentials.
	for _, p := range publicRoutes {
		if res, body := request(t, "GET", s.url+p, ""); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without credentials: %d %s", p, res.StatusCode, body)
		}
	}
}

// TestEveryRouteRefusesUnauthenticatedAndWrongScope: with bearer tokens configured, every route
// answers 401 UNAUTHORIZED (with a Bearer challenge) without a token, with an unknown token and
// with a malformed Authorization header; a read-scoped token gets 403 FORBIDDEN on every write
// route and through on every read route; the read-write token goes through everywhere. A wake's
// routes (callback, ack, release) take only the wake's own token: both API tokens get 401 there
// (TestWakeRoutesRefuseEveryTokenButTheWakesOwn tries the wake tokens).
func TestEveryRouteRefusesUnauthenticatedAndWrongScope(t *testing.T) {
	s := setupRoutes(t)
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
		switch {
		case rt.wake:
			wantCoded(t, rt.name+" with the read token", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
		case rt.write:
			wantCoded(t, rt.name+" with a read token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
		case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
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
	if res, _ := request(t, "GET", s.url+"/v1/stream/__ds/subscriptions/s1", "", "Authorization", bearer(readerToken)); res.StatusCode != http.StatusNotFound {
		t.Fatalf("a refused subscription create made s1: %d", res.StatusCode)
	}
	for _, rt := range everyRoute() {
		res, body := request(t, rt.method, s.url+rt.path, rt.body, append(append([]string{}, rt.headers...), "Authorization", "bEaReR "+writerToken)...)
		if rt.wake {
			wantCoded(t, rt.name+" with the read-write token", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
			continue
		}
		if rt.ops {
			wantCoded(t, rt.name+" with the read-write token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
			continue
		}
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

// TestWakeRoutesRefuseEveryTokenButTheWakesOwn: with bearer tokens configured, a pull-wake's ack
// and release take the wake's own token and nothing else: no token, a malformed one, an unknown
// key id, a forged MAC under the right key id, either API token, another subscription's wake
// token, and the token of an earlier generation of the same subscription are all refused (401
// UNAUTHORIZED, or FENCED for the earlier generation's own token and wake), and none of the
// refusals touched the wake: its own token then acks it.
func TestWakeRoutesRefuseEveryTokenButTheWakesOwn(t *testing.T) {
	s := setupRoutes(t)
	api := []string{"Content-Type", "application/json", "Authorization", bearer(writerToken)}
	for _, id := range []string{"pool", "other-pool"} {
		res, body := request(t, "PUT", s.url+"/v1/stream/__ds/subscriptions/"+id, `{"type":"pull-wake","pattern":"work/*","wake_stream":"wake"}`, api...)
		if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
			t.Fatalf("create subscription %s: %d %s", id, res.StatusCode, body)
		}
	}
	res, body := request(t, "PUT", s.url+"/v1/stream/work/a", `{"n":1}`, api...)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create work/a: %d %s", res.StatusCode, body)
	}
	claimOf := func(id string) claimed {
		t.Helper()
		res, body := request(t, "POST", s.url+"/v1/stream/__ds/subscriptions/"+id+"/claim", `{"worker":"w"}`, api...)
		var c claimed
		if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &c) != nil || c.Token == "" {
			t.Fatalf("claim %s: %d %s", id, res.StatusCode, body)
		}
		return c
	}
	first := claimOf("pool")
	other := claimOf("other-pool")
	// The first generation is given back; the next claim gets the next generation of the wake.
	res, body = request(t, "POST", s.url+"/v1/stream/__ds/subscriptions/pool/release",
		fmt.Sprintf(`{"wake_id":%q,"generation":%d}`, first.WakeID, first.Generation), "Content-Type", "application/json", "Authorization", bearer(first.Token))
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("release the first generation: %d %s", res.StatusCode, body)
	}
	live := claimOf("pool")
	if live.Generation <= first.Generation || live.Token == first.Token {
		t.Fatalf("the second claim got generation %d (token %s), want one after %d with another token", live.Generation, live.Token, first.Generation)
	}
	kid, mac, ok := strings.Cut(live.Token, ".")
	if !ok {
		t.Fatalf("wake token %q is not kid.mac", live.Token)
	}
	// The same MAC with its first character changed (to another of the base64url alphabet).
	forged := []byte(mac)
	if forged[0] == 'A' {
		forged[0] = 'B'
	} else {
		forged[0] = 'A'
	}
	body4 := func(c claimed) string {
		return fmt.Sprintf(`{"wake_id":%q,"generation":%d,"acks":[]}`, c.WakeID, c.Generation)
	}
	cases := []struct {
		name   string
		auth   string
		wake   claimed // the wake the request names
		status int
		code   foldtype.Code
	}{
		{"no token", "", live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"a malformed token", bearer("not-a-wake-token"), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"a token that is not base64url", bearer(kid + ".***"), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"an unknown key id", bearer("ds_unknown." + mac), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"a forged MAC under the right key id", bearer(kid + "." + string(forged)), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"the read-write API token", bearer(writerToken), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"the read API token", bearer(readerToken), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"another subscription's wake token", bearer(other.Token), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"the earlier generation's token for the live wake", bearer(first.Token), live, http.StatusUnauthorized, foldtype.CodeUnauthorized},
		{"the earlier generation's token for its own wake", bearer(first.Token), first, http.StatusConflict, foldtype.CodeFenced},
	}
	for _, c := range cases {
		for _, route := range []string{"ack", "release"} {
			h := []string{"Content-Type", "application/json"}
			if c.auth != "" {
				h = append(h, "Authorization", c.auth)
			}
			res, body := request(t, "POST", s.url+"/v1/stream/__ds/subscriptions/pool/"+route, body4(c.wake), h...)
			wantCoded(t, route+" with "+c.name, res, body, c.status, c.code)
			if c.status == http.StatusUnauthorized && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s with %s: 401 without a Bearer challenge", route, c.name)
			}
		}
	}
	// The positive control: the live wake's own token acks it (so none of the refusals above
	// ended or moved it).
	res, body = request(t, "POST", s.url+"/v1/stream/__ds/subscriptions/pool/ack", `{"wake_id":"`+live.WakeID+`","generation":`+fmt.Sprint(live.Generation)+`,"done":true,"acks":[]}`,
		"Content-Type", "application/json", "Authorization", bearer(live.Token))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("ack with the wake's own token: %d %s", res.StatusCode, body)
	}
}
