package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// /healthz answers while the process serves, /readyz while the store answers too; neither asks
// for a token, and /readyz turns 503 once the store is gone or the server shuts down.
func TestHealthAndReadinessAnswerWithoutAToken(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/health.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := server.ParseBearerTokens(testTokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Logger: quiet, Authorize: bt.Authorize, AllowedHosts: []string{"streams.example.com"}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, p := range []string{server.HealthPath, server.ReadyPath} {
		// A load balancer probes by address: no token, a Host the server does not serve.
		res, body := request(t, "GET", ts.URL+p, "", "Host", "10.0.0.7")
		if res.StatusCode != 200 || body != "ok\n" {
			t.Errorf("GET %s: %d %q, want 200 ok", p, res.StatusCode, body)
		}
		res, body = request(t, "POST", ts.URL+p, "")
		wantCoded(t, "POST "+p, res, body, 405, foldtype.CodeMethodNotAllowed)
	}
	if res, body := request(t, "GET", ts.URL+"/v1/stream/x", "", "Host", "streams.example.com"); res.StatusCode != 401 {
		t.Fatalf("a stream without a token: %d %s; the health routes must be the only open ones", res.StatusCode, body)
	}
	st.Close(context.Background())
	res, body := request(t, "GET", ts.URL+server.ReadyPath, "")
	wantCoded(t, "readyz with the store closed", res, body, 503, foldtype.CodeUnavailable)
	if res, _ := request(t, "GET", ts.URL+server.HealthPath, ""); res.StatusCode != 200 {
		t.Errorf("healthz with the store closed: %d, want 200 (the process is up)", res.StatusCode)
	}
	srv.Shutdown(context.Background())
	res, body = request(t, "GET", ts.URL+server.ReadyPath, "")
	wantCoded(t, "readyz while shutting down", res, body, 503, foldtype.CodeUnavailable)
}

// metricValue returns the value of the sample whose name and labels start the line as given
// (labels in Prometheus' sorted order), or -1 when there is none.
func metricValue(text, sample string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// /metrics needs a read token; it counts requests by route and code, appends and their bytes,
// the store's group commits, and reports each processor's offset and lag.
func TestMetricsNeedAReadTokenAndReportRequestsCommitsAndProcessors(t *testing.T) {
	s := setupSecured(t, server.Config{Metrics: server.NewMetrics()}, true)
	res, body := request(t, "GET", s.url+server.MetricsPath, "")
	wantCoded(t, "metrics without a token", res, body, 401, foldtype.CodeUnauthorized)

	w := []string{"Authorization", bearer(writerToken), "Content-Type", "application/json"}
	if res, body := request(t, "PUT", s.url+"/v1/stream/events", "", w...); res.StatusCode != 200 {
		t.Fatalf("create of the processor's stream: %d %s, want 200 (it exists)", res.StatusCode, body)
	}
	const n = 5
	var tail string
	sent := 0
	for i := range n {
		msg := fmt.Sprintf(`{"type":"note.added","payload":{"i":%d}}`, i)
		sent += len(msg)
		res, body := request(t, "POST", s.url+"/v1/stream/events", msg, w...)
		if res.StatusCode != 204 {
			t.Fatalf("append %d: %d %s", i, res.StatusCode, body)
		}
		tail = res.Header.Get("Stream-Next-Offset")
	}
	request(t, "GET", s.url+"/v1/stream/missing", "", w...)
	if res, body := request(t, "GET", s.url+"/v1/processor/sources/events?waitUntilProcessed="+tail, "", w...); res.StatusCode != 200 {
		t.Fatalf("processor: %d %s", res.StatusCode, body)
	}

	res, text := request(t, "GET", s.url+server.MetricsPath, "", "Authorization", bearer(readerToken))
	head, _ := request(t, "HEAD", s.url+"/v1/stream/events", "", w...)
	last, _, err := server.ParseOffset(head.Header.Get("Stream-Next-Offset"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics with a read token: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for sample, want := range map[string]float64{
		`foldstream_http_requests_total{code="204",method="POST",route="stream"}`: n,
		`foldstream_http_requests_total{code="200",method="PUT",route="stream"}`:  1,
		`foldstream_http_requests_total{code="404",method="GET",route="stream"}`:  1,
		`foldstream_http_requests_total{code="401",method="GET",route="metrics"}`: 1,
		`foldstream_appends_total`:      n,
		`foldstream_append_bytes_total`: float64(sent),
		`foldstream_live_readers`:       0,
		`foldstream_processor_stream_lag_events{slug="sources",stream="/events"}`:  0,
		`foldstream_processor_stream_lag_seconds{slug="sources",stream="/events"}`: 0,
		`foldstream_processor_parked{slug="sources",stream="/events"}`:             0,
	} {
		if got := metricValue(text, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	// The processor's offset covers the tail (live-state deltas take positions of their own
	// after it, so it may be past the tail the protocol shows).
	if got := metricValue(text, `foldstream_processor_offset{slug="sources",stream="/events"}`); got < float64(last) {
		t.Errorf("processor offset %v, want at least the tail %d", got, last)
	}
	// Every append committed; each commit holds at least one write.
	commits := metricValue(text, "foldstream_store_commits_total")
	writes := metricValue(text, "foldstream_store_commit_writes_sum")
	if commits < 1 || writes < n || metricValue(text, "foldstream_store_commit_seconds_count") != commits {
		t.Errorf("commits %v, writes %v: want every write counted in the commit histograms", commits, writes)
	}
	if !regexp.MustCompile(`(?m)^go_goroutines \d+`).MatchString(text) {
		t.Error("no Go runtime metrics")
	}
	// Every answered request but the live reads has its duration observed.
	if got := metricValue(text, `foldstream_http_request_duration_seconds_count{method="POST",route="stream"}`); got != n {
		t.Errorf("POST durations observed: %v, want %d", got, n)
	}
	if !regexp.MustCompile(`(?m)^foldstream_build_info\{goversion="go1\.[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).MatchString(text) {
		t.Errorf("no foldstream_build_info with version, goversion and revision:\n%s", grepLines(text, "foldstream_build_info"))
	}
}

// A live read (long-poll) is counted but its wait is not a duration: it would swamp every
// percentile of the route with the long-poll timeout.
func TestLiveReadsAreCountedWithoutTheirDuration(t *testing.T) {
	s := setupSecured(t, server.Config{Metrics: server.NewMetrics(), LongPollTimeout: 50 * time.Millisecond}, true)
	w := []string{"Authorization", bearer(writerToken), "Content-Type", "application/json"}
	request(t, "PUT", s.url+"/v1/stream/quiet", "", w...)
	head, _ := request(t, "HEAD", s.url+"/v1/stream/quiet", "", w...)
	if res, body := request(t, "GET", s.url+"/v1/stream/quiet?live=long-poll&offset="+head.Header.Get("Stream-Next-Offset"), "", w...); res.StatusCode != 204 {
		t.Fatalf("long-poll at the tail: %d %s, want 204 after the timeout", res.StatusCode, body)
	}
	_, text := request(t, "GET", s.url+server.MetricsPath, "", "Authorization", bearer(readerToken))
	if got := metricValue(text, `foldstream_http_requests_total{code="204",method="GET",route="stream"}`); got != 1 {
		t.Errorf("long-polls counted: %v, want 1", got)
	}
	if got := metricValue(text, `foldstream_http_request_duration_seconds_count{method="GET",route="stream"}`); got > 0 {
		t.Errorf("GET durations observed: %v, want none (the only GET was a long-poll)", got)
	}
	if got := metricValue(text, `foldstream_http_request_duration_seconds_count{method="HEAD",route="stream"}`); got != 1 {
		t.Errorf("HEAD durations observed: %v, want 1", got)
	}
}

// Every metric the server exposes passes Prometheus' own lint (names, units, help, types).
func TestMetricsPassPromlint(t *testing.T) {
	s := setupSecured(t, server.Config{Metrics: server.NewMetrics()}, true)
	w := []string{"Authorization", bearer(writerToken), "Content-Type", "application/json"}
	request(t, "PUT", s.url+"/v1/stream/lint", "", w...)
	request(t, "POST", s.url+"/v1/stream/lint", `{"type":"note.added","payload":{"i":1}}`, w...)
	_, text := request(t, "GET", s.url+server.MetricsPath, "", "Authorization", bearer(readerToken))
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "foldstream_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// With MetricsElsewhere the handler serves no /metrics; Metrics.Handler serves them, untokened,
// where the operator puts it.
func TestMetricsElsewhereLeaveTheMainAddress(t *testing.T) {
	m := server.NewMetrics()
	s := setupSecured(t, server.Config{Metrics: m, MetricsElsewhere: true}, true)
	res, body := request(t, "GET", s.url+server.MetricsPath, "", "Authorization", bearer(readerToken))
	wantCoded(t, "metrics on the main address", res, body, 404, foldtype.CodeNoRoute)
	ms := httptest.NewServer(m.Handler())
	defer ms.Close()
	res, text := request(t, "GET", ms.URL+server.MetricsPath, "")
	if res.StatusCode != 200 || metricValue(text, `foldstream_http_requests_total{code="404",method="GET",route="metrics"}`) != 1 {
		t.Fatalf("metrics on their own address: %d\n%s", res.StatusCode, text)
	}
}

// BenchmarkMetricsOverhead serves HEAD requests in process (no network) with and without
// metrics, so the difference is the cost of counting one request.
func BenchmarkMetricsOverhead(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	for _, bc := range []struct {
		name string
		m    *server.Metrics
	}{{"off", nil}, {"on", server.NewMetrics()}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := newServer(b, st, server.Config{Logger: quiet, Metrics: bc.m})
			put := httptest.NewRequest("PUT", "http://127.0.0.1/v1/stream/b", nil)
			put.Header.Set("Content-Type", "text/plain")
			srv.ServeHTTP(httptest.NewRecorder(), put)
			for b.Loop() {
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, httptest.NewRequest("HEAD", "http://127.0.0.1/v1/stream/b", nil))
				if rec.Code != 200 {
					b.Fatalf("HEAD: %d", rec.Code)
				}
			}
		})
	}
}

type tally struct {
	N int `json:"n"`
}

// fragile counts events and cannot take a "bad" one: its Reduce panics (the event is skipped).
type fragile struct{ foldstream.Base[tally] }

func (fragile) Reduce(a foldstream.ReduceArgs[tally]) (tally, bool, error) {
	if a.Event.Type == "bad" {
		panic("reduce cannot take it")
	}
	return tally{N: a.State.N + 1}, true, nil
}

// stuck's ProcessEvent fails on every "bad" event, so it keeps retrying it.
type stuck struct{ foldstream.Base[struct{}] }

func (stuck) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event != nil && a.Event.Type == "bad" {
		return errors.New("the downstream service refuses it")
	}
	return nil
}

// A processor that keeps failing and one that skips events show in the metrics: failing with its
// attempts, and the skipped events by reason.
func TestMetricsReportFailingProcessorsAndSkippedEvents(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(ctx, t.TempDir()+"/failing.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx) //nolint:errcheck // test cleanup
	fc := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{Slug: "fragile", Version: "1", Consumes: []string{"ok", "bad"}})
	sc := foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{Slug: "stuck", Version: "1", Consumes: []string{"bad"}})
	if _, err := host.Register(ctx, h, "/f", fragile{foldstream.NewBase(fc)}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/f", stuck{foldstream.NewBase(sc)}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet, Metrics: server.NewMetrics()}))
	defer ts.Close()
	if _, err := st.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "ok"}, foldtype.EventInput{Type: "bad"}); err != nil {
		t.Fatal(err)
	}
	var text string
	if !wait.Every(15*time.Second, 20*time.Millisecond, func() bool {
		_, text = request(t, "GET", ts.URL+server.MetricsPath, "")
		return metricValue(text, `foldstream_processor_failing{slug="stuck",stream="/f"}`) == 1 &&
			metricValue(text, `foldstream_processor_skipped_events_total{reason="processor.reduce",slug="fragile"}`) == 1
	}) {
		t.Fatalf("metrics never showed the failing and the skipping processor:\n%s", grepLines(text, "foldstream_processor_"))
	}
	if got := metricValue(text, `foldstream_processor_failed_attempts{slug="stuck",stream="/f"}`); got < 1 {
		t.Errorf("failed attempts %v, want at least 1", got)
	}
	if got := metricValue(text, `foldstream_processor_failing{slug="fragile",stream="/f"}`); got != 0 {
		t.Errorf("the skipping processor counts as failing: %v", got)
	}
}

// grepLines returns the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
