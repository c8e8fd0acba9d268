package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// TestCrossOriginWritesRefusedReadsAllowed: by default a page of any origin may read (CORS
// answers *), but a write carrying a foreign Origin is refused even when it is a "simple" request
// a browser sends without a preflight (a text/plain POST, as a form can); the preflight of a
// foreign write is refused too. Configured origins and the server's own origin may write.
func TestCrossOriginWritesRefusedReadsAllowed(t *testing.T) {
	s := setupSecured(t, server.Config{AllowedOrigins: []string{"https://app.example.com"}}, false)
	evil := "https://evil.example"
	res, body := request(t, "PUT", s.url+"/v1/stream/notes", "", "Content-Type", "text/plain", "Origin", evil)
	wantCoded(t, "foreign create", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	res, body = request(t, "PUT", s.url+"/v1/stream/notes", "hi", "Content-Type", "text/plain", "Origin", "https://app.example.com")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("allowed origin's create: %d %s", res.StatusCode, body)
	}
	for _, method := range []string{"POST", "DELETE"} {
		res, body = request(t, method, s.url+"/v1/stream/notes", "forged", "Content-Type", "text/plain", "Origin", evil)
		wantCoded(t, "foreign simple "+method, res, body, http.StatusForbidden, foldtype.CodeForbidden)
		res, body = request(t, method, s.url+"/v1/stream/notes", "forged", "Content-Type", "text/plain", "Origin", "null")
		wantCoded(t, "opaque-origin "+method, res, body, http.StatusForbidden, foldtype.CodeForbidden)
	}
	res, body = request(t, "GET", s.url+"/v1/stream/notes", "", "Origin", evil)
	if res.StatusCode != http.StatusOK || body != "hi" || res.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("foreign read: %d %q, ACAO %q", res.StatusCode, body, res.Header.Get("Access-Control-Allow-Origin"))
	}
	// The server's own origin (a page it serves) may write.
	res, body = request(t, "POST", s.url+"/v1/stream/notes", " there", "Content-Type", "text/plain", "Origin", s.url)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("same-origin append: %d %s", res.StatusCode, body)
	}
	if _, body = request(t, "GET", s.url+"/v1/stream/notes", ""); body != "hi there" {
		t.Fatalf("stream holds %q: a refused write got through", body)
	}

	// Preflights: a foreign write is refused, a foreign read and an allowed write are answered.
	pre := func(origin, method string, extra ...string) *http.Response {
		h := append([]string{"Origin", origin, "Access-Control-Request-Method", method, "Access-Control-Request-Headers", "content-type"}, extra...)
		res, _ := request(t, "OPTIONS", s.url+"/v1/stream/notes", "", h...)
		return res
	}
	if res := pre(evil, "POST"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign write preflight: %d", res.StatusCode)
	}
	if res := pre(evil, "GET"); res.StatusCode != http.StatusNoContent || !strings.Contains(strings.ToLower(res.Header.Get("Access-Control-Allow-Headers")), "if-none-match") {
		t.Fatalf("foreign read preflight: %d %v", res.StatusCode, res.Header)
	}
	if res := pre("https://app.example.com", "DELETE"); res.StatusCode != http.StatusNoContent {
		t.Fatalf("allowed write preflight: %d", res.StatusCode)
	}
	// Private Network Access: granted to configured origins only, never to any reader.
	if res := pre(evil, "GET", "Access-Control-Request-Private-Network", "true"); res.StatusCode != http.StatusForbidden ||
		res.Header.Get("Access-Control-Allow-Private-Network") != "" {
		t.Fatalf("foreign private-network preflight: %d %v", res.StatusCode, res.Header)
	}
	if res := pre("https://app.example.com", "POST", "Access-Control-Request-Private-Network", "true"); res.StatusCode != http.StatusNoContent ||
		res.Header.Get("Access-Control-Allow-Private-Network") != "true" {
		t.Fatalf("allowed private-network preflight: %d %v", res.StatusCode, res.Header)
	}
}

// TestRestrictReadOrigins: with RestrictReadOrigins, a foreign page cannot read either, and an
// allowed one gets its own origin back (not *).
func TestRestrictReadOrigins(t *testing.T) {
	s := setupSecured(t, server.Config{AllowedOrigins: []string{"https://app.example.com"}, RestrictReadOrigins: true}, false)
	request(t, "PUT", s.url+"/v1/stream/notes", "hi", "Content-Type", "text/plain")
	res, body := request(t, "GET", s.url+"/v1/stream/notes", "", "Origin", "https://evil.example")
	wantCoded(t, "foreign read", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	if res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("refused read still allows the origin: %v", res.Header)
	}
	res, body = request(t, "GET", s.url+"/v1/stream/notes", "", "Origin", "https://app.example.com")
	if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("allowed read: %d %q %v", res.StatusCode, body, res.Header)
	}
}

// TestRebindingHostRefused: on a loopback connection only loopback host names are answered, so
// a page that rebinds its own name to 127.0.0.1 gets 403 for every method (OPTIONS included);
// AllowedHosts opens named hosts.
func TestRebindingHostRefused(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	for _, method := range []string{"GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS"} {
		res, body := request(t, method, s.url+"/v1/stream/rebound", "x", "Host", "attacker.example:4437", "Content-Type", "text/plain")
		if method == "HEAD" {
			body = ""
		}
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("%s with a rebound host: %d %s", method, res.StatusCode, body)
		}
	}
	for _, host := range []string{"localhost:4437", "LOCALHOST", "app.localhost:1", "127.0.0.2:80", "[::1]:4437"} {
		res, body := request(t, "PUT", s.url+"/v1/stream/ok", "", "Host", host, "Content-Type", "text/plain")
		if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
			t.Fatalf("loopback host %q: %d %s", host, res.StatusCode, body)
		}
	}
	open := setupSecured(t, server.Config{AllowedHosts: []string{"streams.example.com", "*.example.org"}}, false)
	for host, want := range map[string]int{"streams.example.com": 201, "a.example.org:8080": 201, "example.org": 403, "localhost": 403} {
		res, body := request(t, "PUT", open.url+"/v1/stream/"+strings.ReplaceAll(host, ":", "-"), "", "Host", host, "Content-Type", "text/plain")
		if res.StatusCode != want {
			t.Fatalf("host %q with AllowedHosts: %d %s, want %d", host, res.StatusCode, body, want)
		}
	}
}

// TestLocationNeverEchoesAnUncheckedHost: Location uses the public base URL when configured, the
// request's (checked) loopback host otherwise.
func TestLocationNeverEchoesAnUncheckedHost(t *testing.T) {
	s := setupSecured(t, server.Config{PublicBaseURL: "https://streams.example.com/"}, false)
	res, _ := request(t, "PUT", s.url+"/v1/stream/a%20b", "", "Content-Type", "text/plain")
	if got := res.Header.Get("Location"); got != "https://streams.example.com/v1/stream/a%20b" {
		t.Fatalf("Location with a public base URL: %q", got)
	}
	s = setupSecured(t, server.Config{}, false)
	res, _ = request(t, "PUT", s.url+"/v1/stream/x", "", "Content-Type", "text/plain", "Host", "localhost:9")
	if got := res.Header.Get("Location"); got != "http://localhost:9/v1/stream/x" {
		t.Fatalf("Location on loopback: %q", got)
	}
}

// TestForkSourceMustBeLocal: a fork source naming another server is refused with 400 rather than
// read as a local path; the same path on this server is accepted.
func TestForkSourceMustBeLocal(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	request(t, "PUT", s.url+"/v1/stream/src", "abc", "Content-Type", "text/plain")
	for _, from := range []string{"https://other.example/v1/stream/src", "ftp://" + strings.TrimPrefix(s.url, "http://") + "/v1/stream/src", "//other.example/v1/stream/src"} {
		res, body := request(t, "PUT", s.url+"/v1/stream/f", "", "Stream-Forked-From", from)
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("fork from %q: %d %s", from, res.StatusCode, body)
		}
	}
	res, body := request(t, "PUT", s.url+"/v1/stream/f", "", "Stream-Forked-From", s.url+"/v1/stream/src")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("fork from this server's URL: %d %s", res.StatusCode, body)
	}
}

// TestExpiredAtCreationRefused: a Stream-Expires-At already past is 400, not a stream that is
// born expired.
func TestExpiredAtCreationRefused(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	res, body := request(t, "PUT", s.url+"/v1/stream/old", "", "Content-Type", "text/plain", "Stream-Expires-At", "2001-01-01T00:00:00Z")
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("expired at creation: %d %s", res.StatusCode, body)
	}
}

// TestInvalidStreamNamesAre400: names the store refuses (NUL or other control characters,
// invalid UTF-8, empty, "." or ".." segments, over the length limit) answer 400
// INVALID_STREAM_NAME at creation, whatever URL escaping carried them.
func TestInvalidStreamNamesAre400(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	for _, name := range []string{"a%00b", "a%0Ab", "a%FFb", "a//b", "a/", "a/%2e%2e/b", "a/./b", "%2E", strings.Repeat("n", 1100)} {
		res, body := request(t, "PUT", s.url+"/v1/stream/"+name, "", "Content-Type", "text/plain")
		wantCoded(t, "create "+name[:min(len(name), 20)], res, body, http.StatusBadRequest, foldtype.CodeInvalidStreamName)
	}
}
