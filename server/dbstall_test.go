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

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// TestAnAppendWhileTheNetworkToTheDatabaseIsDarkAnswers503WithinTheWriteTimeout black-holes a
// node's connections to PostgreSQL (they stay open, nothing passes, nothing is reset): an append
// must answer 503 with Retry-After within the write timeout (code UNAVAILABLE or, when its COMMIT
// was what went unanswered, COMMIT_OUTCOME_UNKNOWN), /readyz must answer 503 and the stalled-
// commits metric read 1; once the network heals the node is ready again by itself and an
// idempotent producer's appends go through, each once.
func TestAnAppendWhileTheNetworkToTheDatabaseIsDarkAnswers503WithinTheWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = time.Second
	px, via := pgtest.NewProxy(t, pgtest.URL(t))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), via+"&write_timeout=1s", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	m := server.NewMetrics()
	ts := httptest.NewServer(newServer(t, st, server.Config{Logger: quiet, Metrics: m}))
	defer ts.Close()
	hc := &http.Client{Timeout: 20 * time.Second} // far past the write timeout: a hang fails the test, not the client

	do := func(method, path, body string) (*http.Response, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b), time.Since(start)
	}
	if r, _, _ := do(http.MethodPut, "/v1/stream/dark", ""); r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", r.StatusCode)
	}
	px.Stall()
	r, body, took := do(http.MethodPost, "/v1/stream/dark", `{"n":0}`)
	code := r.Header.Get(server.HeaderErrorCode)
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		(code != "UNAVAILABLE" && code != "COMMIT_OUTCOME_UNKNOWN") {
		t.Fatalf("append while the network is dark: %d Retry-After %q code %q, want 503 with Retry-After, UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN", r.StatusCode, r.Header.Get("Retry-After"), code)
	}
	if took > 3*writeTimeout+2*time.Second {
		t.Fatalf("append while the network is dark answered after %v, want within about the write timeout (%v)", took, writeTimeout)
	}
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "pgconn") || strings.Contains(body, "dial") {
		t.Fatalf("the 503's message tells internals: %q", body)
	}
	if r, _, took := do(http.MethodGet, "/readyz", ""); r.StatusCode != http.StatusServiceUnavailable || took > 3*time.Second {
		t.Fatalf("/readyz while commits stall: %d after %v, want 503 at once", r.StatusCode, took)
	}
	if got := scrape(t, m, "foldstream_store_commits_stalled"); got != 1 {
		t.Fatalf("foldstream_store_commits_stalled while commits stall = %v, want 1", got)
	}
	px.Resume()
	tick := time.NewTicker(50 * time.Millisecond) // polling the node as a load balancer would
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, _, _ := do(http.MethodGet, "/readyz", "")
		if r.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the network healed: %d, want 200 by itself within 20 s", r.StatusCode)
		}
		<-tick.C
	}
	if got := scrape(t, m, "foldstream_store_commits_stalled"); got != 0 {
		t.Fatalf("foldstream_store_commits_stalled after the network healed = %v, want 0", got)
	}

	s, err := client.NewStream(ts.URL+"/v1/stream/dark", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetContentType("application/json")
	p, err := client.NewIdempotentProducer(s, "p1", client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := p.AppendJSON(map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("producer after the network healed: %v", err)
	}
	_, got, _ := do(http.MethodGet, "/v1/stream/dark?offset=-1", "")
	// The append answered 503 may have been written (its COMMIT may have reached the database
	// when the network healed) or not; the producer's are there once each, in order.
	if got != `[{"n":1},{"n":2},{"n":3}]` && got != `[{"n":0},{"n":1},{"n":2},{"n":3}]` {
		t.Fatalf("stream after the outage: %s", got)
	}
}

// scrape returns the value of the sample named sample in m's exposition (-1 when absent).
func scrape(t *testing.T, m *server.Metrics, sample string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, server.MetricsPath, nil))
	return metricValue(rec.Body.String(), sample)
}

// TestAReaderAtTheTailSeesAWriteWhoseCommitLandedUnconfirmed: the database writes an append's
// COMMIT but its answer never comes back (the node answers COMMIT_OUTCOME_UNKNOWN). A long-poll
// reader of the stream on the same node must be woken and get the message from the database (the
// writer forgot what it held of the stream), not wait for its long-poll timeout: the node hears
// no notification of its own commits.
func TestAReaderAtTheTailSeesAWriteWhoseCommitLandedUnconfirmed(t *testing.T) {
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
	do := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return nil, ""
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if r, _ := do(http.MethodPut, "/v1/stream/landed", ""); r == nil || r.StatusCode != http.StatusCreated {
		t.Fatal("create failed")
	}
	if r, _ := do(http.MethodPost, "/v1/stream/landed", `{"n":1}`); r == nil || r.StatusCode/100 != 2 {
		t.Fatal("first append failed")
	}
	r, _ := do(http.MethodGet, "/v1/stream/landed?offset=-1", "")
	tail := r.Header.Get("Stream-Next-Offset")
	type answer struct {
		body string
		took time.Duration
	}
	got := make(chan answer, 1)
	go func() {
		start := time.Now()
		_, b := do(http.MethodGet, "/v1/stream/landed?live=long-poll&offset="+tail, "")
		got <- answer{b, time.Since(start)}
	}()
	// The reader waits in the node (give it a moment to get there; it answers at once either way).
	waitFor := time.NewTimer(300 * time.Millisecond)
	<-waitFor.C
	// The append's COMMIT must go out before the replies stall. When a statement before it is the
	// one whose answer is held (the group took a round trip of its own first, as it may on a
	// busy machine), the answer is UNAVAILABLE: a known outcome, nothing written, the reader still
	// waiting. Then the append is sent again, a few times.
	for attempt := 1; ; attempt++ {
		px.StallReplies()
		r, _ = do(http.MethodPost, "/v1/stream/landed", `{"n":2}`)
		code := ""
		if r != nil {
			code = r.Header.Get(server.HeaderErrorCode)
		}
		px.Resume()
		if code == "COMMIT_OUTCOME_UNKNOWN" {
			break
		}
		if code != "UNAVAILABLE" || attempt == 5 {
			t.Fatalf("append whose answer is held (attempt %d): %v, want 503 COMMIT_OUTCOME_UNKNOWN", attempt, r)
		}
	}
	select {
	case a := <-got:
		if a.body != `[{"n":2}]` {
			t.Fatalf("the reader at the tail got %q after %v, want the message whose commit landed", a.body, a.took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the reader at the tail was not woken by the write whose commit landed unconfirmed")
	}
}
