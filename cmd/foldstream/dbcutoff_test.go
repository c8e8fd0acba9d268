package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// `foldstream serve` on PostgreSQL, run as a process of its own, whose database is cut off
// (a proxy between the two drops every connection): no answer names the database, and
// `foldstream append` (a process too) prints a clean error — the code, a generic message and the
// request id the server logged the detail under.
func TestServeWhileTheDatabaseIsCutOffAnswersAndTheCLIPrintsCleanErrors(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	px, via := pgtest.NewProxy(t, direct)
	bin := filepath.Join(t.TempDir(), "foldstream")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var serveLog lockedBuffer
	serve := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", via, "--db-wait", "0")
	serve.Stderr = &serveLog
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve did not say where it serves: %v\n%s", err, serveLog.String())
	}
	go io.Copy(io.Discard, stdout)
	base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "foldstream: serving ")), "/v1/stream/")

	do := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := do("PUT", "/v1/stream/orders/a", ""); res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}

	words := []string{"postgres", "pgx", "pgconn", "pgdriver", "dial", "failed to connect", "user=", "search_path",
		"github.com/", "stream store", "preprocessing", "unexpected eof", "queued statement", "write transaction", "connection reset"}
	for _, raw := range []string{direct, via} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(u.Host)
		words = append(words, u.Host, ":"+port, u.Query().Get("search_path"))
	}
	leaks := func(text string) []string {
		var named []string
		for _, w := range words {
			if w != "" && strings.Contains(strings.ToLower(text), strings.ToLower(w)) {
				named = append(named, w)
			}
		}
		return named
	}

	px.Cut()
	for _, rq := range []struct{ method, path, body string }{
		{"POST", "/v1/stream/orders/a", `{"n":1}`},
		{"GET", "/v1/stream/orders/a?offset=-1", ""},
		{"PUT", "/v1/stream/orders/b", ""},
		{"HEAD", "/v1/stream/orders/a", ""},
		{"DELETE", "/v1/stream/orders/a", ""},
		{"GET", "/v1/streams/info?path=/orders/a", ""},
		{"GET", "/readyz", ""},
	} {
		res, body := do(rq.method, rq.path, rq.body)
		answer := body
		for k, vs := range res.Header {
			answer += "\n" + k + ": " + strings.Join(vs, ", ")
		}
		if named := leaks(answer); named != nil {
			t.Errorf("%s %s: the answer (%d) names %q:\n%s", rq.method, rq.path, res.StatusCode, named, answer)
		}
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Foldstream-Error-Code") != "UNAVAILABLE" ||
			res.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: %d %q id %q, want 503 UNAVAILABLE with an X-Request-Id", rq.method, rq.path,
				res.StatusCode, res.Header.Get("Foldstream-Error-Code"), res.Header.Get("X-Request-Id"))
		}
	}

	cli := exec.Command(bin, "append", "--server", base, "--retries", "0", "--content-type", "application/json", "orders/a", `{"n":2}`)
	out, err := cli.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("append with the database cut off: %v, want a failing exit\n%s", err, out)
	}
	msg := string(out)
	t.Logf("foldstream append printed: %s", msg)
	if named := leaks(msg); named != nil {
		t.Errorf("foldstream append printed %q:\n%s", named, msg)
	}
	id, ok := strings.CutPrefix(msg[strings.LastIndex(msg, "(request id "):], "(request id ")
	id, _, _ = strings.Cut(id, ")")
	if !strings.Contains(msg, "UNAVAILABLE") || !ok || id == "" {
		t.Fatalf("foldstream append printed %q, want the code UNAVAILABLE and the request id", msg)
	}
	// The server's log has the detail under that id.
	for _, l := range strings.Split(serveLog.String(), "\n") {
		if strings.Contains(l, id) && strings.Contains(l, "connect") {
			return
		}
	}
	t.Errorf("the server's log has no detail under request id %q:\n%s", id, serveLog.String())
}
