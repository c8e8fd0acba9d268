package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzSSERead feeds arbitrary bytes as an SSE response to a live read (first connection only; the
// reconnect gets 404) and checks that the reader neither panics nor hangs, and that it never
// reconnects after streamClosed.
func FuzzSSERead(f *testing.F) {
	f.Add([]byte("event: data\ndata:[1]\n\nevent: control\ndata:{\"streamNextOffset\":\"1\",\"streamClosed\":true}\n\n"), true)
	f.Add([]byte("event: data\r\ndata:aGk=\r\n\r\nevent: control\r\ndata:{\"streamNextOffset\":\"2\"}\r\n\r\n"), false)
	f.Add([]byte("event: control\ndata:{not json\n\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, jsonStream bool) {
		var calls atomic.Int64
		hc := &http.Client{Transport: rtFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{"Content-Type": {"text/event-stream"}}
			if calls.Add(1) > 1 {
				return &http.Response{StatusCode: http.StatusNotFound, Header: h, Body: io.NopCloser(bytes.NewReader(nil))}, nil
			}
			if !jsonStream {
				h.Set(client.HeaderSSEDataEncoding, "base64")
			}
			return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(bytes.NewReader(body))}, nil
		})}
		s, _ := client.NewStream("http://127.0.0.1:1/s", client.Config{HTTPClient: hc, Retry: client.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Microsecond}})
		if jsonStream {
			s.SetContentType("application/json")
		} else {
			s.SetContentType("application/octet-stream")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed := false
		for c, err := range s.Read(ctx, client.ReadOptions{Live: client.LiveSSE}) {
			if err != nil {
				break
			}
			if closed {
				t.Fatal("a chunk after streamClosed")
			}
			closed = c.Closed
		}
		if ctx.Err() != nil {
			t.Fatal("the read did not end")
		}
		if closed && calls.Load() != 1 {
			t.Fatalf("reconnected after streamClosed: %d connections", calls.Load())
		}
	})
}
