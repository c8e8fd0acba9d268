package bench_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

func TestCreateManyCreatesEveryStreamOnFoldstream(t *testing.T) {
	base, stop, err := testserver.Serve(filepath.Join(t.TempDir(), "create.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := &bench.Client{Base: base, HTTP: bench.NewHTTPClient()}
	name := func(i int) string { return fmt.Sprintf("made-%d", i) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	made, err := bench.CreateMany(ctx, c, 4, 300, name, time.Time{})
	if err != nil || made != 300 {
		t.Fatalf("created %d of 300: %v", made, err)
	}
	for i := range 300 {
		resp, err := c.HTTP.Head(c.StreamURL(name(i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("HEAD %s: %d, %q", name(i), resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	// The same streams again: each answers 200 (exists identically), which counts as made.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if made, err := bench.CreateMany(ctx, c, 4, 300, name, time.Time{}); err != nil || made != 300 {
		t.Fatalf("re-created %d of 300: %v", made, err)
	}
	// A stream that exists with another content type is refused, with the server's reason.
	if st, body, err := bench.RawPut(base, "/v1/stream/"+name(0), "text/plain"); err != nil || st != http.StatusConflict || body == "" {
		t.Fatalf("conflicting PUT: %d %q %v", st, body, err)
	}
}

func TestRawConnReadsChunkedClosingAndInterimAnswers(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.Header.Get("Content-Type") != "application/json" || r.ContentLength != 0 {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		switch n.Add(1) % 5 {
		case 0: // a chunked body
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("first "))
			w.(http.Flusher).Flush()
			w.Write([]byte(strings.Repeat("x", 40000)))
		case 1: // the server closes the connection after this answer
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusCreated)
		case 2: // an interim answer first
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusOK)
		case 3: // a body with a length
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("hello"))
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer ts.Close()
	c, err := bench.NewRawConn(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		st, _, err := c.Put(ctx, fmt.Sprintf("/v1/stream/s%d", i), "application/json")
		if err != nil || (st != http.StatusCreated && st != http.StatusOK) {
			t.Fatalf("request %d: %d %v", i, st, err)
		}
	}
	if got := n.Load(); got != 50 {
		t.Fatalf("server saw %d requests, want 50", got)
	}
}

func TestRawConnSendsAgainWhenTheServerClosedAnIdleConnection(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	ts.Config.IdleTimeout = 20 * time.Millisecond
	closed := make(chan struct{}, 8)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	ts.Start()
	defer ts.Close()
	c, err := bench.NewRawConn(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		if st, _, err := c.Put(ctx, "/v1/stream/idle", "application/json"); err != nil || st != http.StatusCreated {
			t.Fatalf("request %d: %d %v", i, st, err)
		}
		select { // the server closes the idle connection meanwhile
		case <-closed:
		case <-ctx.Done():
			t.Fatalf("request %d: the server never closed the idle connection", i)
		}
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("server saw %d requests, want 3", got)
	}
}

func TestRawConnStopsAtTheContextDeadline(t *testing.T) {
	block := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-block
	}))
	defer ts.Close()
	defer close(block)
	c, err := bench.NewRawConn(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err = c.Put(ctx, "/v1/stream/slow", "application/json")
	var ne interface{ Timeout() bool }
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PUT to a server that never answers: %v, want a timeout", err)
	}
}
