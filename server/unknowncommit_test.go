package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// TestALiveReadAfterAnUnconfirmedCommitIsNotServedAStaleTail: a node keeps the tails of streams
// its live readers watch in memory, extended by its own commits. When one of its COMMITs lands
// but its answer is lost (COMMIT_OUTCOME_UNKNOWN), the node hears no notification of it (a node
// ignores its own), so a cached tail kept across it would stay short of the database, and a
// long-poll from an offset inside the cached records would be answered them with
// Stream-Up-To-Date at the short tail, never the landed message. A write whose outcome is unknown
// drops the cached tails of its streams (it fails when the writer's forgetUnknown does not).
func TestALiveReadAfterAnUnconfirmedCommitIsNotServedAStaleTail(t *testing.T) {
	t.Parallel()
	px, via := pgtest.NewProxy(t, pgtest.URL(t))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), via+"&write_timeout=1s", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	ts := httptest.NewServer(newServer(t, st, server.Config{Logger: quiet, LongPollTimeout: 25 * time.Second}))
	defer ts.Close()
	hc := &http.Client{Timeout: 40 * time.Second}
	do := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Set("X-Test-Body", string(b))
		return resp
	}
	for _, path := range []string{"/v1/stream/stale", "/v1/stream/warm"} {
		if r := do(http.MethodPut, path, ""); r.StatusCode != http.StatusCreated {
			t.Fatalf("create %s failed", path)
		}
	}
	if r := do(http.MethodPost, "/v1/stream/stale", `{"n":1}`); r.StatusCode/100 != 2 {
		t.Fatal("first append failed")
	}
	t1 := do(http.MethodGet, "/v1/stream/stale?offset=-1", "").Header.Get("Stream-Next-Offset")

	// A long-poll at the tail seeds the node's cached tail; the next append extends it.
	woke := make(chan string, 1)
	go func() {
		woke <- do(http.MethodGet, "/v1/stream/stale?live=long-poll&offset="+t1, "").Header.Get("X-Test-Body")
	}()
	seeded := time.NewTimer(300 * time.Millisecond) // the reader reaches the node and waits there
	<-seeded.C
	if r := do(http.MethodPost, "/v1/stream/stale", `{"n":2}`); r.StatusCode/100 != 2 {
		t.Fatal("second append failed")
	}
	if got := <-woke; got != `[{"n":2}]` {
		t.Fatalf("the long-poll at the tail got %q, want the second message", got)
	}
	cachedBefore := testhooks.StoreCachedReads(st)

	// The third append's COMMIT lands; its answer is lost (see
	// TestAReaderAtTheTailSeesAWriteWhoseCommitLandedUnconfirmed for the retry when a statement
	// before the COMMIT was the one held).
	// An attempt held before its COMMIT fails UNAVAILABLE and writes nothing. Its connection is
	// closed, and a connection opened while replies are held cannot finish its handshake, so
	// before the next attempt the pool must hold a working connection again: an append to
	// another stream proves it (on a loaded machine the pool may have none for a while).
	for attempt := 1; ; attempt++ {
		px.StallReplies()
		r := do(http.MethodPost, "/v1/stream/stale", `{"n":3}`)
		code := r.Header.Get(server.HeaderErrorCode)
		px.Resume()
		if code == "COMMIT_OUTCOME_UNKNOWN" {
			break
		}
		if code != "UNAVAILABLE" || attempt == 5 {
			t.Fatalf("append whose answer is held (attempt %d): %d %s %s, want 503 COMMIT_OUTCOME_UNKNOWN",
				attempt, r.StatusCode, code, r.Header.Get("X-Test-Body"))
		}
		if !wait.For(10*time.Second, func() bool { return do(http.MethodPost, "/v1/stream/warm", `{"w":1}`).StatusCode/100 == 2 }) {
			t.Fatal("no append went through within 10 s of the replies flowing again")
		}
	}

	// A long-poll from inside the cached records must see the landed message.
	r := do(http.MethodGet, "/v1/stream/stale?live=long-poll&offset="+t1, "")
	if got := r.Header.Get("X-Test-Body"); got != `[{"n":2},{"n":3}]` {
		t.Errorf("long-poll from %s after the unconfirmed commit: %q (up to date %q), want both later messages",
			t1, got, r.Header.Get("Stream-Up-To-Date"))
	}
	t.Logf("cached reads: %d before the unconfirmed commit, %d after", cachedBefore, testhooks.StoreCachedReads(st))
}
