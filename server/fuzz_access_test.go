package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// FuzzAuthorization: the Authorization parser never panics, accepts only "Bearer <token68>",
// and the built-in authorizer allows a request only when it presents a known token exactly, and
// a write only for a read-write token.
func FuzzAuthorization(f *testing.F) {
	const rw, ro = "writer-token-0123456789abcdef", "reader-token-0123456789abcdef"
	bt, err := ParseBearerTokens("w read-write " + rw + "\nr read " + ro)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Bearer " + rw, "bearer " + ro, "BEARER   " + rw, "Bearer " + rw + " ", "Bearer " + rw + "=",
		"Basic " + rw, "Bearer", "Bearer ", "Bearer a=b", "Bearer ===", rw, "Bearer\t" + rw, "Bearer " + rw[:len(rw)-1],
		"Bearer " + rw + "\x00", "Bearer ÿ"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, header string, write bool) {
		tok, ok := parseBearer([]string{header})
		if ok {
			if !isToken68(tok) || !strings.EqualFold(header[:6], "bearer") || !strings.HasSuffix(header, tok) {
				t.Fatalf("parseBearer(%q) = %q", header, tok)
			}
		}
		r := httptest.NewRequest("GET", "/v1/stream/x", nil)
		r.Header["Authorization"] = []string{header}
		op := OpRead
		if write {
			op = OpAppend
		}
		p, err := bt.Authorize(r, op, "/x")
		switch {
		case err == nil:
			if !ok || (tok != rw && tok != ro) || (write && tok != rw) || p == nil {
				t.Fatalf("Authorize allowed %q (write=%v)", header, write)
			}
		case foldtype.CodeOf(err) == foldtype.CodeUnauthorized:
			if ok && (tok == rw || tok == ro) {
				t.Fatalf("Authorize refused the valid %q", header)
			}
		case foldtype.CodeOf(err) == foldtype.CodeForbidden:
			if tok != ro || !write {
				t.Fatalf("Authorize answered FORBIDDEN to %q (write=%v)", header, write)
			}
		default:
			t.Fatalf("Authorize(%q): uncoded %v", header, err)
		}
	})
}

// FuzzHostAndOrigin: Host and Origin checks never panic; on a loopback connection with no
// AllowedHosts only loopback names pass; an origin may write only when listed or equal to the
// request's own host.
func FuzzHostAndOrigin(f *testing.F) {
	for _, s := range []string{"localhost", "localhost:4437", "LocalHost.", "app.localhost", "127.0.0.1:80", "127.1.2.3",
		"[::1]:4437", "[::1", "::1", "evil.example", "evil.example:4437", "localhost.evil.example", "127.0.0.1.evil.example",
		"evil.example\x00localhost", "[::ffff:127.0.0.1]", "0x7f.0.0.1", "", ":80", "localhost:abc", "https://app.example.com",
		"null", "https://app.example.com:443", "http://127.0.0.1:4437", "https://user@app.example.com", "https://app.example.com/x"} {
		f.Add(s, "https://app.example.com")
	}
	s := &Server{cfg: Config{AllowedOrigins: []string{"https://app.example.com"}}}
	f.Fuzz(func(t *testing.T, host, origin string) {
		r := httptest.NewRequest("POST", "/v1/stream/x", nil)
		r.Host = host
		r = r.WithContext(contextWithLocalAddr(r, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4437}))
		if s.hostAllowed(r) {
			name := hostName(host)
			ip := net.ParseIP(name)
			if name != "localhost" && !strings.HasSuffix(name, ".localhost") && (ip == nil || !ip.IsLoopback()) {
				t.Fatalf("host %q allowed on loopback", host)
			}
			if strings.ContainsAny(name, "\x00 /@\\") {
				t.Fatalf("host %q allowed with name %q", host, name)
			}
		}
		if s.originAllowed(r, origin) && !strings.EqualFold(origin, "https://app.example.com") {
			if !strings.Contains(strings.ToLower(origin), strings.ToLower(host)) || host == "" {
				t.Fatalf("origin %q allowed for host %q", origin, host)
			}
		}
	})
}

func contextWithLocalAddr(r *http.Request, a net.Addr) context.Context {
	return context.WithValue(r.Context(), http.LocalAddrContextKey, a)
}
