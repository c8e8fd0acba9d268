package server_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

type env struct {
	url   string
	st    *stream.Store
	clock *fakeClock
	srv   *server.Server
}

// waitLiveReaders returns once srv serves at least n live reads (long-poll or SSE).
func waitLiveReaders(t *testing.T, srv *server.Server, n int64) {
	t.Helper()
	if !liveReadersReach(srv, n) {
		t.Fatalf("live readers: %d, want %d", srv.LiveReaders(), n)
	}
}

// liveReadersReach reports whether srv serves at least n live reads within 10 s.
func liveReadersReach(srv *server.Server, n int64) bool {
	deadline := time.Now().Add(10 * time.Second)
	for srv.LiveReaders() < n {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

func setup(t *testing.T, cfg server.Config) *env {
	t.Helper()
	clk := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LongPollTimeout == 0 {
		cfg.LongPollTimeout = 200 * time.Millisecond
	}
	srv := newServer(t, st, cfg)
	ts := httptest.NewServer(srv) // binds 127.0.0.1
	t.Cleanup(func() {
		ts.Close()
		st.Close(context.Background())
	})
	return &env{url: ts.URL, st: st, clock: clk, srv: srv}
}

func (e *env) do(t *testing.T, method, path string, headers map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func wantStatus(t *testing.T, what string, res *http.Response, want int) {
	t.Helper()
	if res.StatusCode != want {
		t.Fatalf("%s: status got %d, want %d", what, res.StatusCode, want)
	}
}

func wantHeader(t *testing.T, what string, res *http.Response, name, want string) {
	t.Helper()
	if got := res.Header.Get(name); got != want {
		t.Fatalf("%s: %s got %q, want %q", what, name, got, want)
	}
}

func off(pos int64) string { return server.FormatOffset(pos) }

func TestParseOffset(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"-1": 0, "0000000000000000_0000000000000000": 0, "0000000000000000_0000000000000042": 42}
	for in, want := range good {
		got, now, err := server.ParseOffset(in)
		if err != nil || now || got != want {
			t.Errorf("ParseOffset(%q): got %d %v %v, want %d", in, got, now, err, want)
		}
	}
	if _, now, err := server.ParseOffset("now"); err != nil || !now {
		t.Errorf("ParseOffset(now): got now=%v err=%v", now, err)
	}
	for _, in := range []string{"", "-2", "0", "abc", "0000000000000000_000000000000004", "0000000000000000-0000000000000042",
		"0000000000000000_00000000000000a2", "0000000000000000_0000000000000042,", " 0000000000000000_000000000000004", "../x", "NOW"} {
		if _, _, err := server.ParseOffset(in); err == nil {
			t.Errorf("ParseOffset(%q): got nil error, want one", in)
		}
	}
}

func TestCreateAppendReadHead(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{})
	res, _ := e.do(t, "PUT", "/v1/stream/a", map[string]string{"Content-Type": "text/plain", "Stream-TTL": "3600"}, "hi")
	wantStatus(t, "create", res, 201)
	if loc := res.Header.Get("Location"); !strings.HasPrefix(loc, "http://127.0.0.1:") || !strings.HasSuffix(loc, "/v1/stream/a") {
		t.Fatalf("Location: got %q, want an absolute URL ending in /v1/stream/a", loc)
	}
	wantHeader(t, "create", res, "Stream-Next-Offset", off(2))
	res, _ = e.do(t, "PUT", "/v1/stream/a", map[string]string{"Content-Type": "TEXT/PLAIN; charset=utf-8", "Stream-TTL": "3600"}, "")
	wantStatus(t, "identical re-create", res, 200)
	res, _ = e.do(t, "PUT", "/v1/stream/a", map[string]string{"Content-Type": "text/plain"}, "")
	wantStatus(t, "different re-create", res, 409)

	res, _ = e.do(t, "POST", "/v1/stream/a", map[string]string{"Content-Type": "text/plain"}, " there")
	wantStatus(t, "append", res, 204)
	wantHeader(t, "append", res, "Stream-Next-Offset", off(8))
	res, _ = e.do(t, "POST", "/v1/stream/a", map[string]string{"Content-Type": "application/json"}, "{}")
	wantStatus(t, "append with another type", res, 409)
	res, _ = e.do(t, "POST", "/v1/stream/a", nil, "x")
	wantStatus(t, "append without type", res, 400)
	res, _ = e.do(t, "POST", "/v1/stream/a", map[string]string{"Content-Type": "text/plain"}, "")
	wantStatus(t, "empty append", res, 400)

	res, body := e.do(t, "GET", "/v1/stream/a", nil, "")
	wantStatus(t, "read", res, 200)
	if body != "hi there" {
		t.Fatalf("read: got %q, want %q", body, "hi there")
	}
	wantHeader(t, "read", res, "Stream-Up-To-Date", "true")
	tag := res.Header.Get("ETag")
	if tag == "" {
		t.Fatal("read: no ETag")
	}
	res, body = e.do(t, "GET", "/v1/stream/a?offset=-1", map[string]string{"If-None-Match": tag}, "")
	wantStatus(t, "conditional read", res, 304)
	if body != "" {
		t.Fatalf("304 body: got %q, want empty", body)
	}

	res, _ = e.do(t, "HEAD", "/v1/stream/a", nil, "")
	wantStatus(t, "head", res, 200)
	wantHeader(t, "head", res, "Stream-TTL", "3600")
	wantHeader(t, "head", res, "Cache-Control", "no-store")
	wantHeader(t, "head", res, "Content-Type", "text/plain")
	if res.Header.Get("Stream-Closed") != "" {
		t.Fatal("head of an open stream carries Stream-Closed")
	}

	res, _ = e.do(t, "POST", "/v1/stream/a", map[string]string{"Stream-Closed": "TRUE"}, "")
	wantStatus(t, "close", res, 204)
	wantHeader(t, "close", res, "Stream-Closed", "true")
	res, _ = e.do(t, "POST", "/v1/stream/a", map[string]string{"Content-Type": "text/plain"}, "late")
	wantStatus(t, "append after close", res, 409)
	wantHeader(t, "append after close", res, "Stream-Closed", "true")
	wantHeader(t, "append after close", res, "Stream-Next-Offset", off(8))
	res, _ = e.do(t, "GET", "/v1/stream/a?offset="+off(8), nil, "")
	wantHeader(t, "EOF read", res, "Stream-Closed", "true")

	res, _ = e.do(t, "DELETE", "/v1/stream/a", nil, "")
	wantStatus(t, "delete", res, 204)
	res, _ = e.do(t, "GET", "/v1/stream/a", nil, "")
	wantStatus(t, "read deleted", res, 404)
}

func TestBadRequestsAre4xxWithCommonHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{MaxBodyBytes: 16})
	e.do(t, "PUT", "/v1/stream/b", map[string]string{"Content-Type": "text/plain"}, "")
	cases := []struct {
		method, path string
		headers      map[string]string
		body         string
		want         int
	}{
		{"GET", "/v1/stream/b?offset=", nil, "", 400},
		{"GET", "/v1/stream/b?offset=-1&offset=-1", nil, "", 400},
		{"GET", "/v1/stream/b?offset=a,b", nil, "", 400},
		{"GET", "/v1/stream/b?live=long-poll", nil, "", 400},
		{"GET", "/v1/stream/b?live=sse", nil, "", 400},
		{"GET", "/v1/stream/b?offset=%zz", nil, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-TTL": "00060"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-TTL": "1e3"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-Expires-At": "tomorrow"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-TTL": "5", "Stream-Expires-At": "2031-01-01T00:00:00Z"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-Fork-Sub-Offset": "0"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Stream-Forked-From": "/v1/stream/b", "Stream-Fork-Sub-Offset": "05"}, "", 400},
		{"PUT", "/v1/stream/c", map[string]string{"Content-Type": "application/json"}, "{", 400},
		{"POST", "/v1/stream/b", map[string]string{"Content-Type": "text/plain", "Producer-Id": "p"}, "x", 400},
		{"POST", "/v1/stream/b", map[string]string{"Content-Type": "text/plain", "Producer-Id": "p", "Producer-Epoch": "1e3", "Producer-Seq": "0"}, "x", 400},
		{"POST", "/v1/stream/b", map[string]string{"Content-Type": "text/plain"}, strings.Repeat("x", 17), 413},
		{"POST", "/v1/stream/missing", map[string]string{"Content-Type": "text/plain"}, "x", 404},
		{"PUT", "/v1/stream/__ds/subscriptions/x", nil, "", 400}, // a subscription needs its JSON body
		{"PATCH", "/v1/stream/b", nil, "", 405},
		{"GET", "/elsewhere", nil, "", 404},
	}
	for _, c := range cases {
		res, _ := e.do(t, c.method, c.path, c.headers, c.body)
		if res.StatusCode != c.want {
			t.Errorf("%s %s %v: status got %d, want %d", c.method, c.path, c.headers, res.StatusCode, c.want)
		}
		if res.Header.Get("Access-Control-Allow-Origin") != "*" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: missing CORS or security headers", c.method, c.path)
		}
	}
	res, _ := e.do(t, "OPTIONS", "/v1/stream/b", map[string]string{"Access-Control-Request-Headers": "if-none-match"}, "")
	wantStatus(t, "preflight", res, 204)
	if !strings.Contains(strings.ToLower(res.Header.Get("Access-Control-Allow-Headers")), "if-none-match") {
		t.Fatal("preflight: Access-Control-Allow-Headers lacks If-None-Match")
	}
}

func TestProducerOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{})
	e.do(t, "PUT", "/v1/stream/p", map[string]string{"Content-Type": "application/json"}, "")
	ph := func(epoch, seq string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Producer-Id": "w", "Producer-Epoch": epoch, "Producer-Seq": seq}
	}
	res, _ := e.do(t, "POST", "/v1/stream/p", ph("0", "0"), `[1,2]`)
	wantStatus(t, "first", res, 200)
	wantHeader(t, "first", res, "Producer-Seq", "0")
	res, _ = e.do(t, "POST", "/v1/stream/p", ph("0", "1"), `[3]`)
	wantStatus(t, "second", res, 200)
	res, _ = e.do(t, "POST", "/v1/stream/p", ph("0", "0"), `[1,2]`)
	wantStatus(t, "duplicate", res, 204)
	wantHeader(t, "duplicate", res, "Producer-Seq", "1")
	res, _ = e.do(t, "POST", "/v1/stream/p", ph("0", "3"), `[4]`)
	wantStatus(t, "gap", res, 409)
	wantHeader(t, "gap", res, "Producer-Expected-Seq", "2")
	wantHeader(t, "gap", res, "Producer-Received-Seq", "3")
	res, _ = e.do(t, "POST", "/v1/stream/p", ph("1", "0"), `[4]`)
	wantStatus(t, "new epoch", res, 200)
	res, _ = e.do(t, "POST", "/v1/stream/p", ph("0", "2"), `[5]`)
	wantStatus(t, "zombie", res, 403)
	wantHeader(t, "zombie", res, "Producer-Epoch", "1")
	h := ph("1", "1")
	h["Stream-Closed"] = "true"
	delete(h, "Content-Type")
	res, _ = e.do(t, "POST", "/v1/stream/p", h, "")
	wantStatus(t, "producer close", res, 204)
	wantHeader(t, "producer close", res, "Stream-Closed", "true")
	res, _ = e.do(t, "POST", "/v1/stream/p", h, "")
	wantStatus(t, "producer close retried", res, 204)
	_, body := e.do(t, "GET", "/v1/stream/p", nil, "")
	if body != "[1,2,3,4]" {
		t.Fatalf("data: got %s, want [1,2,3,4]", body)
	}
}

func TestExpectedOffsetAndEventKeysOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{})
	ct := map[string]string{"Content-Type": "application/json"}
	e.do(t, "PUT", "/v1/stream/ev", ct, "")
	res, _ := e.do(t, "POST", "/v1/stream/ev", map[string]string{"Content-Type": "application/json", server.HeaderExpectedOffset: off(0)},
		`{"type":"a","idempotencyKey":"k"}`)
	wantStatus(t, "first", res, 204)
	res, _ = e.do(t, "POST", "/v1/stream/ev", map[string]string{"Content-Type": "application/json", server.HeaderExpectedOffset: off(0)}, `{"type":"b"}`)
	wantStatus(t, "stale expected offset", res, 409)
	wantHeader(t, "stale expected offset", res, server.HeaderErrorCode, "OFFSET_CONFLICT")
	wantHeader(t, "stale expected offset", res, "Stream-Next-Offset", off(1))
	res, _ = e.do(t, "POST", "/v1/stream/ev", ct, `{"type":"a","idempotencyKey":"k"}`)
	wantStatus(t, "retried event", res, 204)
	wantHeader(t, "retried event", res, "Stream-Next-Offset", off(1))
	res, _ = e.do(t, "POST", "/v1/stream/ev", ct, `{"type":"other","idempotencyKey":"k"}`)
	wantStatus(t, "key reuse", res, 409)
	wantHeader(t, "key reuse", res, server.HeaderErrorCode, "IDEMPOTENCY_CONFLICT")
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	short := setup(t, server.Config{LongPollTimeout: 100 * time.Millisecond})
	short.do(t, "PUT", "/v1/stream/lp", map[string]string{"Content-Type": "text/plain"}, "")
	res, _ := short.do(t, "GET", "/v1/stream/lp?offset=now&live=long-poll", nil, "")
	wantStatus(t, "timeout", res, 204)
	wantHeader(t, "timeout", res, "Stream-Up-To-Date", "true")
	wantHeader(t, "timeout", res, "Stream-Next-Offset", off(0))
	cursor := res.Header.Get("Stream-Cursor")
	if cursor == "" {
		t.Fatal("timeout: no Stream-Cursor")
	}

	// A long timeout, so the wake-up below never races the timeout.
	e := setup(t, server.Config{LongPollTimeout: time.Minute})
	e.do(t, "PUT", "/v1/stream/lp", map[string]string{"Content-Type": "text/plain"}, "")
	done := make(chan struct{})
	var body string
	var got *http.Response
	go func() {
		defer close(done)
		got, body = e.do(t, "GET", "/v1/stream/lp?offset=-1&live=long-poll&cursor="+cursor, nil, "")
	}()
	waitLiveReaders(t, e.srv, 1) // the poll is in; it also works if it has not started waiting yet
	e.do(t, "POST", "/v1/stream/lp", map[string]string{"Content-Type": "text/plain"}, "new")
	<-done
	wantStatus(t, "woken", got, 200)
	if body != "new" {
		t.Fatalf("woken: got %q, want new", body)
	}
	e.do(t, "POST", "/v1/stream/lp", map[string]string{"Stream-Closed": "true"}, "")
	res, _ = e.do(t, "GET", "/v1/stream/lp?offset="+off(3)+"&live=long-poll", nil, "")
	wantStatus(t, "closed tail", res, 204)
	wantHeader(t, "closed tail", res, "Stream-Closed", "true")
}

// TestCursorRule: the cursor is the current 20 s interval since 2024-10-09, and a client cursor
// at or ahead of it always moves forward (docs/server.md#caching-and-the-cursor).
func TestCursorRule(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{LongPollTimeout: 10 * time.Millisecond})
	e.clock.Set(time.Date(2024, 10, 9, 0, 1, 0, 0, time.UTC)) // interval 3
	e.do(t, "PUT", "/v1/stream/c", map[string]string{"Content-Type": "text/plain"}, "")
	res, _ := e.do(t, "GET", "/v1/stream/c?offset=-1&live=long-poll", nil, "")
	wantHeader(t, "fresh", res, "Stream-Cursor", "3")
	res, _ = e.do(t, "GET", "/v1/stream/c?offset=-1&live=long-poll&cursor=1", nil, "")
	wantHeader(t, "behind", res, "Stream-Cursor", "3")
	for range 20 {
		res, _ = e.do(t, "GET", "/v1/stream/c?offset=-1&live=long-poll&cursor=3", nil, "")
		c, err := strconv.Atoi(res.Header.Get("Stream-Cursor"))
		if err != nil || c <= 3 {
			t.Fatalf("echoed cursor: got %d (%v), want greater than 3", c, err)
		}
	}
}

// sseEvents reads SSE events until the server closes the connection or n events arrived.
func sseEvents(t *testing.T, url string, n int) ([]string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("sse: status %d", res.StatusCode)
	}
	var events []string
	var cur strings.Builder
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && len(events) < n {
		line := sc.Text()
		if line == "" {
			events = append(events, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line + "\n")
	}
	return events, res.Header
}

func TestSSEText(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{})
	e.do(t, "PUT", "/v1/stream/s", map[string]string{"Content-Type": "text/plain"}, "a\r\nb\rc\nd")
	e.do(t, "POST", "/v1/stream/s", map[string]string{"Stream-Closed": "true"}, "")
	events, h := sseEvents(t, e.url+"/v1/stream/s?offset=-1&live=sse", 10)
	if h.Get("Content-Type") != "text/event-stream" || h.Get("stream-sse-data-encoding") != "" {
		t.Fatalf("headers: %v", h)
	}
	want := []string{
		"event: data\ndata:a\ndata:b\ndata:c\ndata:d\n",
		"event: control\ndata:{\"streamNextOffset\":\"" + off(8) + "\",\"upToDate\":true,\"streamClosed\":true}\n",
	}
	if strings.Join(events, "|") != strings.Join(want, "|") {
		t.Fatalf("events:\ngot  %q\nwant %q", events, want)
	}
}

func TestSSEBinaryAndLive(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{LongPollTimeout: 100 * time.Millisecond})
	e.do(t, "PUT", "/v1/stream/bin", map[string]string{"Content-Type": "application/octet-stream"}, "\x00\x01")
	go func() {
		if !liveReadersReach(e.srv, 1) { // append while the SSE reader is live
			t.Error("the SSE reader never started")
		}
		e.do(t, "POST", "/v1/stream/bin", map[string]string{"Content-Type": "application/octet-stream", "Stream-Closed": "true"}, "\xff")
	}()
	events, h := sseEvents(t, e.url+"/v1/stream/bin?offset=-1&live=sse", 20)
	if h.Get("stream-sse-data-encoding") != "base64" {
		t.Fatal("binary SSE without base64 encoding header")
	}
	var data []byte
	for i, ev := range events {
		if strings.HasPrefix(ev, "event: data\n") {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(ev, "event: data\ndata:"), "\n"))
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b...)
			if i+1 >= len(events) || !strings.HasPrefix(events[i+1], "event: control\n") {
				t.Fatalf("data event %d not followed by a control event: %q", i, events)
			}
		}
	}
	if string(data) != "\x00\x01\xff" {
		t.Fatalf("data: got %q, want 00 01 ff", data)
	}
	last := events[len(events)-1]
	if !strings.Contains(last, `"streamClosed":true`) {
		t.Fatalf("last event: got %q, want streamClosed", last)
	}
}

// TestSSECycles: the server ends an idle SSE connection after SSEMaxDuration.
func TestSSECycles(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{LongPollTimeout: 50 * time.Millisecond, SSEMaxDuration: 300 * time.Millisecond})
	e.do(t, "PUT", "/v1/stream/cy", map[string]string{"Content-Type": "text/plain"}, "")
	start := time.Now()
	events, _ := sseEvents(t, e.url+"/v1/stream/cy?offset=-1&live=sse", 1000)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("connection lasted %v, want about 300ms", d)
	}
	// Only the initial control event is certain: under load the end can come before any
	// keep-alive (both are timers), so keep-alives are checked by TestSSEKeepAlive.
	if len(events) < 1 || !strings.Contains(events[0], "event: control") {
		t.Fatalf("got events %q, want the initial control first", events)
	}
}

// TestSSEKeepAlive: an idle SSE connection gets a control event every LongPollTimeout after the
// initial one. The connection's end is an hour away, so it cannot cut the wait short.
func TestSSEKeepAlive(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{LongPollTimeout: 50 * time.Millisecond, SSEMaxDuration: time.Hour})
	e.do(t, "PUT", "/v1/stream/ka", map[string]string{"Content-Type": "text/plain"}, "")
	events, _ := sseEvents(t, e.url+"/v1/stream/ka?offset=-1&live=sse", 2)
	if len(events) != 2 || !strings.Contains(events[1], "event: control") {
		t.Fatalf("got events %q, want the initial control and a keep-alive", events)
	}
}

// TestShutdownEndsWaitingReads: Server.Shutdown answers a waiting long-poll at once and closes SSE
// connections.
func TestShutdownEndsWaitingReads(t *testing.T) {
	t.Parallel()
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h := newServer(t, st, server.Config{LongPollTimeout: time.Minute})
	ts := httptest.NewServer(h)
	defer ts.Close()
	e := &env{url: ts.URL, st: st}
	e.do(t, "PUT", "/v1/stream/w", map[string]string{"Content-Type": "text/plain"}, "")
	type result struct {
		status int
		d      time.Duration
	}
	results := make(chan result, 2)
	for _, q := range []string{"live=long-poll", "live=sse"} {
		go func() {
			start := time.Now()
			res, err := http.Get(ts.URL + "/v1/stream/w?offset=-1&" + q)
			if err != nil {
				results <- result{-1, 0}
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			results <- result{res.StatusCode, time.Since(start)}
		}()
	}
	waitLiveReaders(t, h, 2) // both are in; the test holds either way
	h.Shutdown(context.Background())
	for range 2 {
		select {
		case r := <-results:
			if r.status != 204 && r.status != 200 {
				t.Fatalf("status %d", r.status)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting read outlived Shutdown")
		}
	}
}

// TestSSETextChunksEndOnCharacterBoundaries: a text record larger than the read chunk is sent in
// several data events, none of which splits a UTF-8 character.
func TestSSETextChunksEndOnCharacterBoundaries(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{ReadChunkBytes: 7})
	text := "héllo wörld ☃☃☃ ok"
	e.do(t, "PUT", "/v1/stream/u", map[string]string{"Content-Type": "text/plain"}, text)
	e.do(t, "POST", "/v1/stream/u", map[string]string{"Stream-Closed": "true"}, "")
	events, _ := sseEvents(t, e.url+"/v1/stream/u?offset=-1&live=sse", 100)
	var got strings.Builder
	for _, ev := range events {
		if strings.HasPrefix(ev, "event: data\n") {
			chunk := strings.TrimSuffix(strings.TrimPrefix(ev, "event: data\ndata:"), "\n")
			if !utf8.ValidString(chunk) {
				t.Fatalf("data event %q splits a character", chunk)
			}
			got.WriteString(chunk)
		}
	}
	if got.String() != text {
		t.Fatalf("text: got %q, want %q", got.String(), text)
	}
}

// TestSSELiveEventsOfEverySize: a live SSE reader gets each append, byte for byte, whatever the
// sizes of the events before it (the connection reuses its read memory between events). Each
// message is appended once the one before it arrived, so each is a live read of its own.
func TestSSELiveEventsOfEverySize(t *testing.T) {
	t.Parallel()
	e := setup(t, server.Config{LongPollTimeout: time.Hour})
	e.do(t, "PUT", "/v1/stream/sizes", map[string]string{"Content-Type": "application/json"}, "")
	sizes := []int{10, 3000, 20, 9000, 5, 70000, 1, 4000, 2}
	var want []string
	for i, n := range sizes {
		want = append(want, fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat(string(rune('a'+i)), n)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/stream/sizes?offset=-1&live=sse", nil)
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got []string
	started := false
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for len(got) < len(want) && sc.Scan() {
		line := sc.Text()
		if !started && strings.HasPrefix(line, "data:{") {
			// The first control event: the reader is at the tail.
			started = true
			e.do(t, "POST", "/v1/stream/sizes", map[string]string{"Content-Type": "application/json"}, want[0])
			continue
		}
		data, ok := strings.CutPrefix(line, "data:[")
		if !ok {
			continue
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal([]byte("["+data), &msgs); err != nil {
			t.Fatalf("data line %.80q: %v", data, err)
		}
		for _, m := range msgs {
			got = append(got, string(m))
		}
		if len(got) < len(want) {
			e.do(t, "POST", "/v1/stream/sizes", map[string]string{"Content-Type": "application/json"}, want[len(got)])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("message %d: got %.60q (%d bytes), want %.60q (%d bytes)", i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}
