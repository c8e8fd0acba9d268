package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
)

// lockedBuffer is a bytes.Buffer safe for the server goroutine and the polling test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// holds waits up to 10 s for the buffer to hold text, and reports whether it does. A process's
// log reaches the buffer through the pipe exec copies from on a goroutine of the test's own, so a
// line the process wrote before it answered a request may land just after the answer was read;
// on a loaded machine that goroutine runs late.
func (l *lockedBuffer) holds(text string) bool {
	return wait.For(10*time.Second, func() bool { return strings.Contains(l.String(), text) })
}

// servingCmd is a "foldstream serve" running in the test's process.
type servingCmd struct {
	base           string // http://127.0.0.1:PORT
	stdout, stderr *lockedBuffer
	stop           context.CancelFunc // as SIGINT does
	done           chan error
}

// startServeCmd runs "foldstream serve" with args (an --addr of 127.0.0.1:0 is added) and waits
// until it serves.
func startServeCmd(t *testing.T, args ...string) *servingCmd {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sc := &servingCmd{stdout: new(lockedBuffer), stderr: new(lockedBuffer), stop: cancel, done: make(chan error, 1)}
	go func() {
		sc.done <- commands["serve"].run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), sc.stdout, sc.stderr)
	}()
	if !wait.For(10*time.Second, func() bool {
		if out := sc.stdout.String(); strings.Contains(out, "serving http://") {
			sc.base = strings.TrimSpace(strings.TrimPrefix(out, "foldstream: serving "))
			sc.base = strings.TrimSuffix(sc.base, "/v1/stream/")
		}
		return sc.base != ""
	}) {
		t.Fatalf("server did not start: %s", sc.stderr.String())
	}
	return sc
}

// shutdown stops the server as SIGINT does and waits for a clean exit.
func (sc *servingCmd) shutdown(t *testing.T) {
	t.Helper()
	sc.stop()
	select {
	case err := <-sc.done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// createText creates a text/plain stream holding "hi" over HTTP.
func createText(t *testing.T, base, name string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", base+"/v1/stream/"+name, strings.NewReader("hi"))
	req.Header.Set("Content-Type", "text/plain")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("create: status %d, want 201", res.StatusCode)
	}
}

// TestServeRoundTripAndGracefulShutdown starts "foldstream serve" on a free loopback port,
// creates and reads a stream over HTTP, then cancels the context (as SIGINT does) and expects a
// clean exit.
func TestServeRoundTripAndGracefulShutdown(t *testing.T) {
	db := filepath.Join(t.TempDir(), "serve.db")
	sc := startServeCmd(t, "--db", db, "--long-poll-timeout", "100ms", "--log-level", "debug")
	createText(t, sc.base, "hello")
	sc.shutdown(t)
	if !strings.Contains(sc.stderr.String(), "msg=request") || !strings.Contains(sc.stderr.String(), "status=201") {
		t.Fatalf("debug log lacks the request line: %s", sc.stderr.String())
	}
	if _, err := os.Stat(db + "-lock"); !os.IsNotExist(err) {
		t.Errorf("after a clean shutdown the store's lock file remains: %v", err)
	}
}

// With --log-format json every line serve logs is one JSON object a log pipeline can parse,
// the request lines included; an unknown format is refused before anything starts.
func TestServeLogsJSONLinesWithLogFormatJSON(t *testing.T) {
	sc := startServeCmd(t, "--db", filepath.Join(t.TempDir(), "serve.db"), "--log-level", "debug", "--log-format", "json")
	createText(t, sc.base, "hello")
	sc.shutdown(t)
	sawRequest := false
	for _, line := range strings.Split(strings.TrimSpace(sc.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", line, err)
		}
		if rec["msg"] == "request" && rec["status"] == float64(201) {
			sawRequest = true
		}
	}
	if !sawRequest {
		t.Errorf("no request line with status 201 in:\n%s", sc.stderr.String())
	}
	var stderr bytes.Buffer
	if err := commands["serve"].run(t.Context(), []string{"--log-format", "yaml"}, io.Discard, &stderr); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format yaml: %v, want it refused", err)
	}
}

// serve's help names both stores it takes: a SQLite file and a postgres:// URL.
func TestServeHelpNamesBothStores(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"serve", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	if help := errOut.String(); strings.Contains(help, "over a SQLite store") || !strings.Contains(help, "PostgreSQL database (--db postgres://") {
		t.Errorf("serve -h:\n%s\nwant it to name SQLite files and postgres:// URLs", help)
	}
	out.Reset()
	if run(context.Background(), []string{"help"}, &out, &errOut); strings.Contains(out.String(), "over a SQLite store") {
		t.Errorf("help: %s", out.String())
	}
}

func TestUsageAndUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "serve") {
		t.Fatalf("help: code %d, output %q", code, out.String())
	}
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown command: code %d, want 2", code)
	}
}

// TestServeRefusesPublicAddressWithoutAuthentication: a non-loopback address without tokens is
// refused before anything listens or opens, unless --allow-unauthenticated-public says so.
func TestServeRefusesPublicAddressWithoutAuthentication(t *testing.T) {
	t.Setenv(tokensEnv, "")
	db := filepath.Join(t.TempDir(), "public.db")
	var stdout, stderr lockedBuffer
	err := commands["serve"].run(context.Background(), []string{"--addr", "0.0.0.0:0", "--db", db}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "without authentication") {
		t.Fatalf("serve on 0.0.0.0 without tokens: %v", err)
	}
	if _, statErr := os.Stat(db); !os.IsNotExist(statErr) {
		t.Fatalf("the refused serve created its database: %v", statErr)
	}
	for _, addr := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1"} {
		if !loopbackAddr(addr) {
			t.Fatalf("loopbackAddr(%q) = false", addr)
		}
	}
	for _, addr := range []string{":4437", "0.0.0.0:1", "[::]:1", "example.com:1", "10.0.0.1:1"} {
		if loopbackAddr(addr) {
			t.Fatalf("loopbackAddr(%q) = true", addr)
		}
	}
}

// TestServeTokensFromFileAndEnvironment: tokens load from --tokens-file and $FOLDSTREAM_TOKENS
// together; a bad list stops serve at start with the line at fault.
func TestServeTokensFromFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("# service tokens\nwriter read-write writer-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokensEnv, "dash read reader-token-0123456789abcdef")
	bt, err := loadTokens(file)
	if err != nil || bt == nil || bt.Len() != 2 {
		t.Fatalf("loadTokens: %v", err)
	}
	t.Setenv(tokensEnv, "dash admin short")
	var stdout, stderr lockedBuffer
	err = commands["serve"].run(context.Background(), []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "x.db"), "--tokens-file", file}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "$"+tokensEnv+": tokens line 1") {
		t.Fatalf("serve with a bad token list: %v", err)
	}
}

// TestServeHelpUsesTheCommonUsageFormat: "serve -h" prints "usage: foldstream serve [flags]" and
// the flags, like the other sub-commands, and exits cleanly.
func TestServeHelpUsesTheCommonUsageFormat(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	for _, want := range []string{"usage: foldstream serve [flags]", "-tokens-file", "-allowed-origins", "-max-live-readers", "-allow-unauthenticated-public"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("serve -h lacks %q:\n%s", want, stderr.String())
		}
	}
}

// serve answers /healthz and /readyz, and with --metrics-addr serves the metrics on that address
// only.
func TestServeHealthRoutesAndMetricsAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	db := filepath.Join(t.TempDir(), "ops.db")
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--db", db}, &stdout, &stderr)
	}()
	var base, metrics string
	if !wait.For(10*time.Second, func() bool {
		for _, line := range strings.Split(stdout.String(), "\n") {
			if u, ok := strings.CutPrefix(line, "foldstream: serving "); ok {
				base = strings.TrimSuffix(u, "/v1/stream/")
			}
			if u, ok := strings.CutPrefix(line, "foldstream: metrics at "); ok {
				metrics = u
			}
		}
		return base != "" && metrics != ""
	}) {
		t.Fatalf("server did not start: %s %s", stdout.String(), stderr.String())
	}
	get := func(u string) (int, string) {
		t.Helper()
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(base + p); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	if code, _ := get(base + "/metrics"); code != 404 {
		t.Errorf("/metrics on the main address with --metrics-addr: %d, want 404", code)
	}
	if code, body := get(metrics); code != 200 || !strings.Contains(body, `foldstream_http_requests_total{code="200",method="GET",route="health"} 2`) {
		t.Errorf("metrics address: %d\n%s", code, body)
	} else {
		// The store reports its writer's queue (docs/server.md#metrics).
		if !regexp.MustCompile(`(?m)^foldstream_store_writer_queue \d+$`).MatchString(body) {
			t.Errorf("metrics address: no foldstream_store_writer_queue")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// --access-log logs each request at info level, with its request id, while --log-level stays
// info (no other debug line).
func TestServeAccessLogLogsEachRequestAtInfo(t *testing.T) {
	sc := startServeCmd(t, "--db", filepath.Join(t.TempDir(), "serve.db"), "--access-log")
	createText(t, sc.base, "hello")
	sc.shutdown(t)
	log := sc.stderr.String()
	if !regexp.MustCompile(`level=INFO msg=request requestId=\S+ method=PUT path=/v1/stream/hello .*status=201`).MatchString(log) {
		t.Errorf("no info-level request line with its request id:\n%s", log)
	}
	if strings.Contains(log, "level=DEBUG") {
		t.Errorf("--access-log turned on debug lines:\n%s", log)
	}
}
