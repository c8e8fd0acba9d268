package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
)

// scriptedSSE answers each SSE connection with the next script entry, recording the raw queries.
type scriptedSSE struct {
	mu      sync.Mutex
	queries []string
	scripts []string
	header  http.Header
}

func (s *scriptedSSE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := len(s.queries)
	s.queries = append(s.queries, r.URL.RawQuery)
	s.mu.Unlock()
	if i >= len(s.scripts) {
		http.Error(w, "script exhausted", http.StatusInternalServerError)
		return
	}
	for k, vs := range s.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(s.scripts[i]))
}

func TestSSEReconnectsFromLastOffsetAndStopsAtClosed(t *testing.T) {
	t.Parallel()
	payload := []byte("binary\x00\xff data that spans lines")
	enc := base64.StdEncoding.EncodeToString(payload)
	srv := &scriptedSSE{header: http.Header{client.HeaderSSEDataEncoding: {"base64"}}, scripts: []string{
		// First connection: one batch split over two data lines (CRLF endings), then the server
		// hangs up without streamClosed.
		"event: data\r\ndata:" + enc[:8] + "\r\ndata:" + enc[8:] + "\r\n\r\n" +
			"event: control\r\ndata:{\"streamNextOffset\":\"0000000000000000_0000000000000010\",\"streamCursor\":\"123\",\"upToDate\":true}\r\n\r\n",
		// Second connection: a keep-alive, then closure.
		"event: control\ndata:{\"streamNextOffset\":\"0000000000000000_0000000000000010\",\"streamCursor\":\"124\",\"upToDate\":true}\n\n" +
			"event: control\ndata:{\"streamNextOffset\":\"0000000000000000_0000000000000010\",\"streamClosed\":true}\n\n",
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	s, _ := client.NewStream(hs.URL+"/v1/stream/b?token=abc", client.Config{Retry: client.RetryPolicy{InitialDelay: time.Millisecond}})
	s.SetContentType("application/octet-stream")
	var got []byte
	var chunks []client.Chunk
	for c, err := range s.Read(t.Context(), client.ReadOptions{Live: client.LiveSSE, Offset: "0000000000000000_0000000000000000"}) {
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got = append(got, c.Data...)
		chunks = append(chunks, c)
	}
	if string(got) != string(payload) {
		t.Errorf("data: got %q, want %q", got, payload)
	}
	if n := len(chunks); n != 2 || !chunks[1].Closed || chunks[0].NextOffset != "0000000000000000_0000000000000010" {
		t.Errorf("chunks: got %+v, want a data chunk then a closed chunk", chunks)
	}
	want := []string{
		"live=sse&offset=0000000000000000_0000000000000000&token=abc",
		"cursor=123&live=sse&offset=0000000000000000_0000000000000010&token=abc",
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if fmt.Sprint(srv.queries) != fmt.Sprint(want) {
		t.Errorf("queries (sorted, cursor echoed, resumed, none after closed):\n got %q\nwant %q", srv.queries, want)
	}
}

func TestSSEJSONEmptyBatchDoesNotStall(t *testing.T) {
	t.Parallel()
	srv := &scriptedSSE{scripts: []string{
		"event: data\ndata:[]\n\nevent: control\ndata:{\"streamNextOffset\":\"1\",\"streamCursor\":\"1\",\"upToDate\":true}\n\n" +
			"event: data\ndata:[{\"n\":1},\ndata:{\"n\":2}]\n\nevent: control\ndata:{\"streamNextOffset\":\"2\",\"streamClosed\":true}\n\n",
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	s, _ := client.NewStream(hs.URL+"/j", client.Config{})
	s.SetContentType("application/json")
	var got []string
	for m, err := range s.Messages(t.Context(), client.ReadOptions{Live: client.LiveSSE}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m))
	}
	if fmt.Sprint(got) != `[{"n":1} {"n":2}]` {
		t.Errorf("messages: got %v", got)
	}
}

func TestReadRetriesRateLimitHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set(client.HeaderStreamNextOffset, "5")
		w.Header().Set(client.HeaderStreamUpToDate, "true")
		w.Write([]byte("hello"))
	}))
	defer hs.Close()
	s, _ := client.NewStream(hs.URL+"/t", client.Config{Retry: client.RetryPolicy{InitialDelay: time.Millisecond}})
	var got string
	for c, err := range s.Read(t.Context(), client.ReadOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got += string(c.Data)
	}
	if got != "hello" || calls.Load() != 2 {
		t.Errorf("got %q after %d calls, want hello after 2", got, calls.Load())
	}
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		header map[string]string
		want   error
	}{
		// A server without codes: the code follows the status.
		{http.StatusNotFound, nil, client.ErrStreamNotFound},
		{http.StatusGone, nil, client.ErrStreamGone},
		{http.StatusRequestEntityTooLarge, nil, client.ErrTooLarge},
		{http.StatusConflict, nil, client.ErrConflict},
		{http.StatusConflict, map[string]string{"Stream-Closed": "true", "Stream-Next-Offset": "9"}, client.ErrStreamClosed},
		{http.StatusBadRequest, nil, client.ErrBadRequest},
		{http.StatusUnauthorized, nil, client.ErrUnauthorized},
		{http.StatusForbidden, nil, client.ErrForbidden},
		{http.StatusMethodNotAllowed, nil, client.ErrMethodNotAllowed},
		{http.StatusInsufficientStorage, nil, client.ErrInsufficientStorage},
		{http.StatusTeapot, nil, client.ErrUnexpectedStatus},
		// A foldstream server: the code is its Foldstream-Error-Code, whatever the status.
		{http.StatusNotFound, map[string]string{"Foldstream-Error-Code": "NOT_REGISTERED"}, client.ErrNotRegistered},
		{http.StatusNotFound, map[string]string{"Foldstream-Error-Code": "NO_ROUTE"}, client.ErrNoRoute},
		{http.StatusBadRequest, map[string]string{"Foldstream-Error-Code": "INVALID_STREAM_NAME"}, client.ErrInvalidStreamName},
		{http.StatusConflict, map[string]string{"Foldstream-Error-Code": "OFFSET_CONFLICT"}, client.ErrOffsetConflict},
		{http.StatusConflict, map[string]string{"Foldstream-Error-Code": "STREAM_CLOSED", "Stream-Next-Offset": "9"}, client.ErrStreamClosed},
		{http.StatusForbidden, map[string]string{"Foldstream-Error-Code": "FORBIDDEN"}, client.ErrForbidden},
		{http.StatusBadRequest, map[string]string{"Foldstream-Error-Code": "A_CODE_FROM_A_NEWER_SERVER"}, &client.Error{Code: "A_CODE_FROM_A_NEWER_SERVER"}},
	} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range tc.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(tc.status)
		}))
		s, _ := client.NewStream(hs.URL+"/e", client.Config{})
		_, err := s.Append(context.Background(), []byte("x"))
		if !errors.Is(err, tc.want) {
			t.Errorf("append answered %d %v: got %v, want %v", tc.status, tc.header, err, tc.want)
		}
		var ce *client.Error
		if tc.want != client.ErrStreamClosed && (!errors.As(err, &ce) || ce.Status != tc.status) {
			t.Errorf("append answered %d: got %#v, want *Error with that status", tc.status, err)
		}
		for _, rerr := range s.Read(context.Background(), client.ReadOptions{}) {
			if tc.status != http.StatusConflict && !errors.Is(rerr, tc.want) {
				t.Errorf("read answered %d: got %v, want %v", tc.status, rerr, tc.want)
			}
		}
		hs.Close()
	}
	var sc *client.StreamClosedError
	if !strings.Contains((&client.StreamClosedError{FinalOffset: "9"}).Error(), "9") || errors.As(errors.New("x"), &sc) {
		t.Error("StreamClosedError must name its final offset")
	}
}

func TestLongPollEchoesCursorAndSortsParams(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var queries []string
	step := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		step++
		n := step
		mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		switch n {
		case 1: // catch-up: all there is
			w.Header().Set(client.HeaderStreamNextOffset, "a")
			w.Header().Set(client.HeaderStreamUpToDate, "true")
			w.Write([]byte("x"))
		case 2: // long-poll timeout
			w.Header().Set(client.HeaderStreamNextOffset, "a")
			w.Header().Set(client.HeaderStreamCursor, "100")
			w.WriteHeader(http.StatusNoContent)
		case 3: // new data
			w.Header().Set(client.HeaderStreamNextOffset, "b")
			w.Header().Set(client.HeaderStreamCursor, "101")
			w.Header().Set(client.HeaderStreamUpToDate, "true")
			w.Write([]byte("y"))
		default: // closed at the tail
			w.Header().Set(client.HeaderStreamNextOffset, "b")
			w.Header().Set(client.HeaderStreamClosed, "true")
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer hs.Close()
	s, _ := client.NewStream(hs.URL+"/s?zeta=1", client.Config{})
	var got string
	var last client.Chunk
	for c, err := range s.Read(t.Context(), client.ReadOptions{Live: client.LiveAuto}) {
		if err != nil {
			t.Fatal(err)
		}
		got += string(c.Data)
		last = c
	}
	if got != "xy" || !last.Closed || last.Status != http.StatusNoContent {
		t.Errorf("read: got %q ending with %+v, want xy and a closed 204", got, last)
	}
	want := []string{"offset=-1&zeta=1", "live=long-poll&offset=a&zeta=1", "cursor=100&live=long-poll&offset=a&zeta=1", "cursor=101&live=long-poll&offset=b&zeta=1"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(queries) != fmt.Sprint(want) {
		t.Errorf("queries:\n got %q\nwant %q", queries, want)
	}
}

// A read its context ends yields the context's error as its last pair, in every live mode, so a
// cut read never looks complete; a read that ended on its own yields nothing more.
func TestReadEndedByItsContextYieldsTheContextsErrorLast(t *testing.T) {
	eachServer(t, func(t *testing.T, base string) {
		ctx := t.Context()
		s, _ := client.NewStream(base+"/v1/stream/ctx-end", client.Config{})
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		for _, live := range []client.LiveMode{client.LiveSSE, client.LiveLongPoll, client.LiveAuto} {
			rctx, cancel := context.WithCancel(ctx)
			var msgs int
			var last error
			pairs := 0
			for m, err := range s.Messages(rctx, client.ReadOptions{Live: live}) {
				pairs++
				if err != nil {
					if m != nil {
						t.Errorf("%s: the error pair carries message %s, want none", live, m)
					}
					last = err
					continue
				}
				if last != nil {
					t.Fatalf("%s: a message after the error %v", live, last)
				}
				msgs++
				cancel() // the caller's context ends while the read waits for more
			}
			cancel()
			if msgs != 1 || !errors.Is(last, context.Canceled) {
				t.Errorf("%s: %d messages, last error %v; want 1 message, then context.Canceled", live, msgs, last)
			}
		}
		// A catch-up that reached the tail ended on its own: no error, even with ctx ended since.
		rctx, cancel := context.WithCancel(ctx)
		n := 0
		for _, err := range s.Messages(rctx, client.ReadOptions{}) {
			if err != nil {
				t.Fatalf("catch-up: %v", err)
			}
			n++
			cancel()
		}
		if n != 1 {
			t.Errorf("catch-up: %d messages, want 1", n)
		}
		// A context ended before the read starts: only its error.
		rctx, cancel = context.WithCancel(ctx)
		cancel()
		var got []error
		for _, err := range s.Read(rctx, client.ReadOptions{}) {
			got = append(got, err)
		}
		if len(got) != 1 || !errors.Is(got[0], context.Canceled) {
			t.Errorf("read with an ended context yields %v, want just context.Canceled", got)
		}
	})
}
