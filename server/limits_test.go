package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// dialSmall connects to the server at url (http://host:port) with a small receive buffer, so a
// client that does not read stalls the server's writes quickly.
func dialSmall(t *testing.T, url string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitAdmitted polls until a live reader is admitted again (MaxLiveReaders 1 freed), within 60 s.
func waitAdmitted(t *testing.T, url string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		res, err := testClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		cancel()
		if err == nil && res.StatusCode == http.StatusOK {
			return
		}
		select {
		case <-deadline:
			t.Fatal("the live reader was never released")
		case <-tick.C:
		}
	}
}

// TestNeverReadingSSEClientIsCut: an SSE reader that stops reading is cut once a write has been
// blocked for WriteTimeout — long before SSEMaxDuration — and its live-reader slot is freed.
func TestNeverReadingSSEClientIsCut(t *testing.T) {
	s := setupSecured(t, server.Config{WriteTimeout: 300 * time.Millisecond, SSEMaxDuration: time.Hour, MaxLiveReaders: 1}, false)
	big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	if res, body := request(t, "PUT", s.url+"/v1/stream/big", big, "Content-Type", "application/octet-stream"); res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	c := dialSmall(t, s.url)
	start := time.Now()
	if _, err := io.WriteString(c, "GET /v1/stream/big?offset=-1&live=sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the status line only: the reader is admitted and its handler is writing.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	status := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(c, status); err != nil || string(status) != "HTTP/1.1 200" {
		t.Fatalf("SSE reader not admitted: %q %v", status, err)
	}
	// The slot is held while the server writes; it comes back once the write deadline cuts us.
	waitAdmitted(t, s.url+"/v1/stream/big?offset=now&live=sse")
	t.Logf("cut after %v", time.Since(start))
	if time.Since(start) > time.Minute {
		t.Fatalf("cut after %v", time.Since(start))
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("draining the cut connection: %v after %d bytes", err, n)
	}
	t.Logf("drained %d bytes of %d", n, len(big)*4/3)
	if n >= int64(len(big)*4/3) {
		t.Fatalf("received %d bytes: the whole stream was sent, nothing was cut", n)
	}
}

// TestSlowBodyIsCut: a request body that trickles in is cut at BodyReadTimeout with 408.
func TestSlowBodyIsCut(t *testing.T) {
	s := setupSecured(t, server.Config{BodyReadTimeout: 300 * time.Millisecond}, false)
	request(t, "PUT", s.url+"/v1/stream/slow", "", "Content-Type", "text/plain")
	c := dialSmall(t, s.url)
	if _, err := io.WriteString(c, "POST /v1/stream/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nx"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: %d, want 408", res.StatusCode)
	}
	if _, body := request(t, "GET", s.url+"/v1/stream/slow", ""); body != "" {
		t.Fatalf("the cut body was stored: %q", body)
	}
}

// TestLiveReaderLimit: past MaxLiveReaders, a long-poll or SSE reader gets 503 OVERLOADED with
// Retry-After; catch-up reads are not counted.
func TestLiveReaderLimit(t *testing.T) {
	s := setupSecured(t, server.Config{MaxLiveReaders: 1, LongPollTimeout: time.Hour}, false)
	request(t, "PUT", s.url+"/v1/stream/l", "x", "Content-Type", "text/plain")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/stream/l?offset=-1&live=sse", nil)
	held, err := testClient.Do(req)
	if err != nil || held.StatusCode != http.StatusOK {
		t.Fatalf("first live reader: %v", err)
	}
	defer held.Body.Close()
	for _, q := range []string{"?offset=-1&live=sse", "?offset=now&live=long-poll"} {
		res, body := request(t, "GET", s.url+"/v1/stream/l"+q, "")
		wantCoded(t, "live reader past the limit", res, body, http.StatusServiceUnavailable, foldtype.CodeOverloaded)
		if res.Header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
	}
	if res, body := request(t, "GET", s.url+"/v1/stream/l", ""); res.StatusCode != http.StatusOK || body != "x" {
		t.Fatalf("catch-up read: %d %q", res.StatusCode, body)
	}
}

// TestBodyBytesInFlightLimit: while one upload holds the whole in-flight budget, another write
// gets 503 OVERLOADED with Retry-After.
func TestBodyBytesInFlightLimit(t *testing.T) {
	s := setupSecured(t, server.Config{MaxBodyBytes: 1000, MaxBodyBytesInFlight: 1000, BodyReadTimeout: time.Minute}, false)
	request(t, "PUT", s.url+"/v1/stream/b", "", "Content-Type", "text/plain")
	// hold starts an upload that reserves the whole budget and stalls; its channel receives the
	// answer if the server refused it (a probe held bytes at that moment), so it is started again.
	hold := func() <-chan struct{} {
		c := dialSmall(t, s.url)
		if _, err := io.WriteString(c, "POST /v1/stream/b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			_, _ = http.ReadResponse(bufio.NewReader(c), nil)
		}()
		return answered
	}
	held := hold()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		res, body := request(t, "POST", s.url+"/v1/stream/b", "y", "Content-Type", "text/plain")
		if res.StatusCode == http.StatusServiceUnavailable {
			select {
			case <-held: // the probe was refused because the held upload was, too: start over
				held = hold()
				continue
			default:
			}
			wantCoded(t, "write past the in-flight budget", res, body, http.StatusServiceUnavailable, foldtype.CodeOverloaded)
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			return
		}
		if res.StatusCode != http.StatusNoContent { // admitted before the upload reserved its bytes
			t.Fatalf("write: %d %s", res.StatusCode, body)
		}
		select {
		case <-held:
			held = hold()
		case <-deadline:
			t.Fatal("the held upload never filled the in-flight budget")
		case <-tick.C:
		}
	}
}

// TestConnectionLimit: past MaxConnections a new connection reads 503 OVERLOADED with
// Retry-After and is closed; once a connection closes, new ones are served again.
func TestConnectionLimit(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	limited := newServer(t, s.st, server.Config{MaxConnections: 1})
	ts := httptest.NewUnstartedServer(limited)
	ts.Listener = limited.LimitListener(ts.Listener)
	ts.Start()
	defer ts.Close()
	first := dialSmall(t, ts.URL)
	if _, err := io.WriteString(first, "HEAD /v1/stream/none HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(first)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("first connection: %v", err)
	}
	second := dialSmall(t, ts.URL)
	// A client sends its request at once; the refusal must still reach it (no reset).
	if _, err := io.WriteString(second, "PUT /v1/stream/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\nhi"); err != nil {
		t.Fatal(err)
	}
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	wantCoded(t, "connection past the limit", res, string(body), http.StatusServiceUnavailable, foldtype.CodeOverloaded)
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	first.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c := dialSmall(t, ts.URL)
		_, _ = io.WriteString(c, "HEAD /v1/stream/none HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil && res.StatusCode == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's slot never came back")
		}
		<-tick.C
	}
}

// TestOverloadedUploadIsAnsweredBeforeItsBody: a write refused for the in-flight budget gets its
// 503 at once, without the client sending its body first. (Go's server otherwise reads the unread
// body of a small request before it replies, so a refusal waited for the whole upload, or for
// BodyReadTimeout when the client waits for the answer before sending.)
func TestOverloadedUploadIsAnsweredBeforeItsBody(t *testing.T) {
	s := setupSecured(t, server.Config{MaxBodyBytes: 1000, MaxBodyBytesInFlight: 1000, BodyReadTimeout: time.Minute}, false)
	request(t, "PUT", s.url+"/v1/stream/b", "", "Content-Type", "text/plain")
	stalled := func(length string) (net.Conn, <-chan *http.Response) {
		c := dialSmall(t, s.url)
		if _, err := io.WriteString(c, "POST /v1/stream/b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: "+length+"\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
		answer := make(chan *http.Response, 1)
		go func() {
			res, _ := http.ReadResponse(bufio.NewReader(c), nil)
			answer <- res
		}()
		return c, answer
	}
	// Hold the whole budget with a stalled upload; a complete one-byte probe refused while the
	// holder is unanswered proves the holder has reserved it.
	_, held := stalled("1000")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		res, body := request(t, "POST", s.url+"/v1/stream/b", "y", "Content-Type", "text/plain")
		if res.StatusCode == http.StatusServiceUnavailable && len(held) == 0 {
			break
		}
		if len(held) > 0 { // refused while a probe held a byte: hold again
			_, held = stalled("1000")
		} else if res.StatusCode != http.StatusNoContent {
			t.Fatalf("probe: %d %s", res.StatusCode, body)
		}
		<-tick.C
	}
	// This upload sends 1 of its 100 bytes and waits: its refusal must come anyway.
	c, answer := stalled("100")
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a bound; before the fix it waited BodyReadTimeout (1 min)
	res := <-answer
	if res == nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(server.HeaderErrorCode) != string(foldtype.CodeOverloaded) {
		t.Fatalf("stalled upload past the budget: got %+v, want 503 OVERLOADED before its body", res)
	}
}
