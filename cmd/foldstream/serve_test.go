package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestServeRoundTripAndGracefulShutdown starts "foldstream serve" on a free loopback port,
// creates and reads a stream over HTTP, then cancels the context (as SIGINT does) and expects a
// clean exit.
func TestServeRoundTripAndGracefulShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	db := filepath.Join(t.TempDir(), "serve.db")
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", "127.0.0.1:0", "--db", db, "--long-poll-timeout", "100ms", "--log-level", "debug"}, &stdout, &stderr)
	}()
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == ""; {
		if out := stdout.String(); strings.Contains(out, "serving http://") {
			base = strings.TrimSpace(strings.TrimPrefix(out, "foldstream: serving "))
			base = strings.TrimSuffix(base, "/v1/stream/")
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	req, _ := http.NewRequest("PUT", base+"/v1/stream/hello", strings.NewReader("hi"))
	req.Header.Set("Content-Type", "text/plain")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("create: status %d, want 201", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not shut down")
	}
	if !strings.Contains(stderr.String(), "msg=request") || !strings.Contains(stderr.String(), "status=201") {
		t.Fatalf("debug log lacks the request line: %s", stderr.String())
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
