package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/refserver"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// serveFile serves a store in a real SQLite file under t.TempDir() and returns the base URL.
func serveFile(t *testing.T, cfg server.Config) (string, *stream.Store) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "catchup.db"), storeopen.Config{Store: stream.Config{Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = log
	ts := httptest.NewServer(newServer(t, st, cfg)) // binds 127.0.0.1
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		st.Close(context.Background())
	})
	return ts.URL, st
}

// fillJSON creates the JSON stream name holding n messages {"i":k} (k = 1…n), appended in POSTs
// of at most 10,000, and closes it when closed.
func fillJSON(t *testing.T, base, name string, n int, closed bool) {
	t.Helper()
	u := base + "/v1/stream/" + name
	mustDo(t, http.MethodPut, u, map[string]string{"Content-Type": "application/json"}, nil, http.StatusCreated)
	for from := 1; from <= n; from += 10_000 {
		var b bytes.Buffer
		b.WriteByte('[')
		for k := from; k < from+10_000 && k <= n; k++ {
			if k > from {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"i":%d}`, k)
		}
		b.WriteByte(']')
		mustDo(t, http.MethodPost, u, map[string]string{"Content-Type": "application/json"}, b.Bytes(), http.StatusNoContent)
	}
	if closed {
		mustDo(t, http.MethodPost, u, map[string]string{"Stream-Closed": "true"}, nil, http.StatusNoContent)
	}
}

func mustDo(t *testing.T, method, u string, headers map[string]string, body []byte, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
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
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d", method, u, res.StatusCode, want)
	}
	return res
}

// A catch-up GET answers the whole stream up to its tail in one response, so a client that makes
// one request (the TypeScript client with live: false) reads all of it and sees the closure.
func TestCatchUpReadReturnsWholeClosedStreamToTypeScriptClient(t *testing.T) {
	const n = 100_000
	base, _ := serveFile(t, server.Config{})
	fillJSON(t, base, "long", n, true)

	out := refserver.RunScript(t, "ts-read.mjs", base+"/v1/stream/long")
	var got struct {
		Messages     int    `json:"messages"`
		Offset       string `json:"offset"`
		UpToDate     bool   `json:"upToDate"`
		StreamClosed bool   `json:"streamClosed"`
		Requests     int    `json:"requests"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	if got.Messages != n || !got.UpToDate || !got.StreamClosed || got.Offset != server.FormatOffset(n) {
		t.Fatalf("TypeScript client read %+v, want %d messages, up to date, closed, offset %s", got, n, server.FormatOffset(n))
	}
}

// Our own client reads the same stream to the end and reports the closure.
func TestCatchUpReadReturnsWholeClosedStreamToGoClient(t *testing.T) {
	const n = 100_000
	base, _ := serveFile(t, server.Config{})
	fillJSON(t, base, "long", n, true)

	s, err := client.NewStream(base+"/v1/stream/long", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, responses, closed := 0, 0, false
	for c, err := range s.Read(context.Background(), client.ReadOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if !c.Partial {
			responses++ // the client hands a long response on in parts; the last ends it
		}
		var arr []json.RawMessage
		if err := json.Unmarshal(c.Data, &arr); err != nil {
			t.Fatal(err)
		}
		for _, m := range arr {
			msgs++
			if want := fmt.Sprintf(`{"i":%d}`, msgs); string(m) != want {
				t.Fatalf("message %d is %s, want %s", msgs, m, want)
			}
		}
		closed = c.Closed
	}
	if msgs != n || !closed || responses != 1 {
		t.Fatalf("Go client read %d messages in %d responses, closed=%v; want %d in 1, closed", msgs, responses, closed, n)
	}
}

// A byte stream longer than one page comes back whole, in one response, with the headers of its
// tail.
func TestCatchUpReadStreamsAByteStreamPastOnePage(t *testing.T) {
	base, _ := serveFile(t, server.Config{ReadChunkBytes: 1000})
	u := base + "/v1/stream/bytes"
	mustDo(t, http.MethodPut, u, map[string]string{"Content-Type": "text/plain"}, nil, http.StatusCreated)
	var want bytes.Buffer
	for i := range 50 {
		chunk := []byte(strings.Repeat(string(rune('a'+i%26)), 333))
		want.Write(chunk)
		mustDo(t, http.MethodPost, u, map[string]string{"Content-Type": "text/plain"}, chunk, http.StatusNoContent)
	}
	res, err := http.Get(u + "?offset=-1")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("read %d bytes, want %d", len(body), want.Len())
	}
	if got := res.Header.Get("Stream-Next-Offset"); got != server.FormatOffset(int64(want.Len())) {
		t.Fatalf("Stream-Next-Offset %s", got)
	}
	if res.Header.Get("Stream-Up-To-Date") != "true" || res.Header.Get("Stream-Closed") != "" {
		t.Fatalf("headers %v", res.Header)
	}
	// The same range again is a 304 with its ETag.
	req, _ := http.NewRequest(http.MethodGet, u+"?offset=-1", nil)
	req.Header.Set("If-None-Match", res.Header.Get("ETag"))
	again, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: status %d, want 304", again.StatusCode)
	}
}

// Messages appended while a catch-up response is being written are not in it: it ends at the tail
// its headers name, so a client resuming from Stream-Next-Offset reads each message once.
func TestCatchUpReadEndsAtTheTailSeenAtTheStart(t *testing.T) {
	const n = 30_000
	base, _ := serveFile(t, server.Config{ReadChunkBytes: 1 << 10})
	fillJSON(t, base, "growing", n, false)
	u := base + "/v1/stream/growing"

	res, err := http.Get(u + "?offset=-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("Stream-Next-Offset"); got != server.FormatOffset(n) {
		t.Fatalf("Stream-Next-Offset %s, want %s", got, server.FormatOffset(n))
	}
	// The response has started; grow the stream while the rest of it is written.
	for i := range 20 {
		mustDo(t, http.MethodPost, u, map[string]string{"Content-Type": "application/json"},
			[]byte(fmt.Sprintf(`[{"late":%d},{"late":%d}]`, 2*i, 2*i+1)), http.StatusNoContent)
	}
	var arr []json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&arr); err != nil {
		t.Fatal(err)
	}
	if len(arr) != n {
		t.Fatalf("read %d messages, want the %d present at the start", len(arr), n)
	}
	for i, m := range arr {
		if want := fmt.Sprintf(`{"i":%d}`, i+1); string(m) != want {
			t.Fatalf("message %d is %s, want %s", i+1, m, want)
		}
	}
	if res.Header.Get("Stream-Closed") != "" || res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("headers %v", res.Header)
	}
}
