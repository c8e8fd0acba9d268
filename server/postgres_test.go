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
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// TestDatabaseGoneAnswers503AndRecovers: a node on PostgreSQL whose database cannot be reached
// answers 503 with Retry-After and code UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN (never a success it did not commit), and
// serves again by itself once the database is back.
func TestDatabaseGoneAnswers503AndRecovers(t *testing.T) {
	t.Parallel()
	px, via := pgtest.NewProxy(t, pgtest.URL(t))
	st, err := storeopen.Open(context.Background(), via, storeopen.Config{Store: stream.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	ts := httptest.NewServer(newServer(t, st, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer ts.Close()

	do := func(method, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+"/v1/stream/gone", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := do(http.MethodPut, ""); r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", r.StatusCode)
	}
	px.Cut()
	r := do(http.MethodPost, `{"n":1}`)
	// The append's whole transaction may go out in one round trip with its COMMIT, on a pooled
	// connection the cut broke: then whether the database got it is not known to the node.
	if code := r.Header.Get("Foldstream-Error-Code"); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		(code != "UNAVAILABLE" && code != "COMMIT_OUTCOME_UNKNOWN") {
		t.Fatalf("append with the database gone: %d Retry-After %q code %q, want 503 with Retry-After, UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN",
			r.StatusCode, r.Header.Get("Retry-After"), r.Header.Get("Foldstream-Error-Code"))
	}
	if r := do(http.MethodGet, ""); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("read with the database gone: %d, want 503", r.StatusCode)
	}
	px.Restore()
	// The pool reconnects by itself; the append is retried as a client would until it does.
	var last int
	if !wait.Every(20*time.Second, 50*time.Millisecond, func() bool {
		last = do(http.MethodPost, `{"n":2}`).StatusCode
		return last/100 == 2
	}) {
		t.Fatalf("the node did not recover after the database came back: %d", last)
	}
	// Only the acknowledged message is in the stream: the refused one was never committed.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/stream/gone?offset=-1", nil)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `[{"n":2}]` {
		t.Fatalf("stream after the outage: %s, want [{\"n\":2}]", b)
	}
}
