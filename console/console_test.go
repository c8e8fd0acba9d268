package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/console"
)

// TestLiveStateModule runs the unit tests of static/livestate.js (patch application, the revision
// chain, re-seeding after a broken chain, the event-stream reader) with node's built-in runner.
func TestLiveStateModule(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			// CI installs node (.ci/run): a skip there would count a missing check as a pass.
			t.Fatal("node is not installed: the browser module's tests cannot run")
		}
		t.Skip("node is not installed")
	}
	cmd := exec.Command(node, "--test", "testdata/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test testdata/: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("node --test reported failures:\n%s", out)
	}
}

func TestHandlerServesThePageAndItsFiles(t *testing.T) {
	h := console.New(console.Config{StreamPrefix: "/v1/stream/", ListPath: "/v1/streams", InfoPath: "/v1/streams/info"})
	cases := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="console/app.js">`},
		{"/console/app.js", "text/javascript; charset=utf-8", `from "./livestate.js"`},
		{"/console/livestate.js", "text/javascript; charset=utf-8", "export function followLiveState"},
		{"/console/style.css", "text/css; charset=utf-8", ":root"},
		{"/console/icon.svg", "image/svg+xml", "<svg"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200", c.path, rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != c.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.contentType)
		}
		if !strings.Contains(rec.Body.String(), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
		etag := rec.Header().Get("ETag")
		if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q: want an ETag and no-cache", c.path, etag, rec.Header().Get("Cache-Control"))
		}
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		req.Header.Set("If-None-Match", etag)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: status %d, want 304", c.path, rec.Code)
		}
	}
}

func TestHandlerPageForbidsForeignScriptsAndFraming(t *testing.T) {
	h := console.New(console.Config{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if got := rec.Header().Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options %q, want DENY", got)
	}
}

func TestHandlerConfigNamesTheServerRoutes(t *testing.T) {
	h := console.New(console.Config{StreamPrefix: "/s/", ProcessorPrefix: "/p/", ListPath: "/v1/streams", InfoPath: "/v1/streams/info"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/config.json", nil))
	var got map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("config.json: %v: %s", err, rec.Body)
	}
	want := map[string]string{"streamPrefix": "/s/", "processorPrefix": "/p/", "listPath": "/v1/streams", "infoPath": "/v1/streams/info"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("config.json %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestHandlerRefusesWritesAndUnknownFiles(t *testing.T) {
	h := console.New(console.Config{})
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/console/app.js", http.StatusMethodNotAllowed},
		{http.MethodGet, "/console/nope.js", http.StatusNotFound},
		{http.MethodGet, "/console/../console.go", http.StatusNotFound},
		{http.MethodHead, "/console/app.js", http.StatusOK},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.want {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, rec.Code, c.want)
		}
	}
}
