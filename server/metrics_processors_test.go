package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// echo answers every "add" by emitting one "added" (which it does not consume).
type echo struct{ foldstream.Base[tally] }

func (echo) Reduce(a foldstream.ReduceArgs[tally]) (tally, bool, error) {
	return tally{N: a.State.N + 1}, true, nil
}

func (echo) ProcessEvent(a *foldstream.ProcessEventArgs[tally]) error {
	if a.Event == nil || a.Event.Type != "add" {
		return nil
	}
	_, err := a.Append(a.Context(), foldtype.EventInput{Type: "added"})
	return err
}

func newEcho() echo {
	return echo{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[tally]{
		Slug: "echo", Version: "1", Consumes: []string{"add"}, Emits: []string{"added"},
	}))}
}

// scrapeText GETs the metrics of the server at url and lints them with Prometheus' own linter.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	res, text := request(t, "GET", url+server.MetricsPath, "")
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", server.MetricsPath, res.StatusCode, text)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "foldstream_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	return text
}

// eventually waits until cond holds (internal/harness/wait), failing t after 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !wait.For(15*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// appendAndWait appends one event of type typ to path and waits until slug processed it.
func appendAndWait(t *testing.T, st *stream.Store, h *host.Host, path, slug, typ string) {
	t.Helper()
	ctx := context.Background()
	evs, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, path, slug, evs[0].Offset, 10*time.Second); err != nil {
		t.Fatalf("%s on %s: %v", slug, path, err)
	}
}

// A pattern processor's engine that closes (here to make room under MaxOpenEngines) keeps its
// series, and its counters carry on from where they were when the engine reopens: they live in the
// host per registered slug, not in the engine. No series names one of the pattern's streams.
func TestAProcessorWhoseEngineClosesKeepsItsSeriesAndItsCountersOnlyGrow(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(ctx, t.TempDir()+"/idle.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet, MaxOpenEngines: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx) //nolint:errcheck // test cleanup
	if err := host.RegisterPattern(ctx, h, "/carts/*", newEcho()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet, Metrics: server.NewMetrics()}))
	defer ts.Close()

	// Registered, no engine open yet: the slug's series are there, at zero.
	text := scrapeText(t, ts.URL)
	for _, sample := range []string{
		`foldstream_processor_processed_events_total{slug="echo"}`,
		`foldstream_processor_emitted_events_total{slug="echo"}`,
		`foldstream_processor_lag_events{slug="echo"}`,
		`foldstream_processor_lag_seconds{slug="echo"}`,
		`foldstream_processor_process_event_duration_seconds_count{slug="echo"}`,
	} {
		if got := metricValue(text, sample); got != 0 {
			t.Errorf("before any event: %s = %v, want 0 (the series exists while registered)", sample, got)
		}
	}

	counters := []string{
		`foldstream_processor_processed_events_total{slug="echo"}`,
		`foldstream_processor_emitted_events_total{slug="echo"}`,
		`foldstream_processor_process_event_duration_seconds_count{slug="echo"}`,
	}
	last := map[string]float64{}
	steps := []struct {
		path string
		want float64 // processed (and emitted) so far
	}{
		{"/carts/a", 1},
		{"/carts/b", 2}, // opening b closes a: the cap is one engine
		{"/carts/a", 3}, // a reopens from its checkpoint; its counts add to the slug's
		{"/carts/a", 4},
	}
	for i, s := range steps {
		appendAndWait(t, st, h, s.path, "echo", "add")
		if i == 1 {
			eventually(t, "the engine of /carts/a to close", func() bool {
				for _, ps := range h.ProcessorsOn(ctx, "/carts/a") {
					if ps.Slug == "echo" {
						return !ps.Open
					}
				}
				return false
			})
		}
		text := scrapeText(t, ts.URL)
		for _, c := range counters {
			got := metricValue(text, c)
			if got != s.want {
				t.Errorf("step %d (%s): %s = %v, want %v", i, s.path, c, got, s.want)
			}
			if got < last[c] {
				t.Errorf("step %d: counter %s went back from %v to %v", i, c, last[c], got)
			}
			last[c] = got
		}
		if got := metricValue(text, `foldstream_processor_lag_events{slug="echo"}`); got != 0 {
			t.Errorf("step %d: lag %v events, want 0 (caught up)", i, got)
		}
		if strings.Contains(text, `stream="/carts/`) {
			t.Fatalf("step %d: a series per stream of a pattern:\n%s", i, grepLines(text, "foldstream_processor_"))
		}
	}
}

// flaky panics in ProcessEvent on a "bad" event while broken is set.
type flakyProc struct {
	foldstream.Base[tally]
	broken *atomic.Bool
}

func (p flakyProc) ProcessEvent(a *foldstream.ProcessEventArgs[tally]) error {
	if a.Event != nil && a.Event.Type == "bad" && p.broken.Load() {
		panic("the bad event")
	}
	return nil
}

// While a processor fails on an event its lag in seconds is the age of that event, so it rises as
// the (injected) clock runs, and its lag in events counts the durable events from it on; healed,
// both return to 0. The failures are counted by code. The processor listing (GET /v1/processors)
// reports the same lag as the metrics at every step, in events and in seconds.
func TestLagSecondsRisesWhileAProcessorFailsAndReturnsToZeroWhenHealed(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := testsupport.NewFakeClock()
	st, err := storeopen.Open(ctx, t.TempDir()+"/lag.db", storeopen.Config{Store: stream.Config{Logger: quiet, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx) //nolint:errcheck // test cleanup
	broken := &atomic.Bool{}
	broken.Store(true)
	p := flakyProc{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[tally]{
		Slug: "flaky", Version: "1", Consumes: []string{"tick", "bad"},
	})), broken}
	if _, err := host.Register(ctx, h, "/f", p); err != nil {
		t.Fatal(err)
	}
	m := server.NewMetrics()
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet, Metrics: m}))
	defer ts.Close()
	appendAndWait(t, st, h, "/f", "flaky", "tick")

	lagOf := func(text string) (events, seconds, streamEvents, streamSeconds float64) {
		return metricValue(text, `foldstream_processor_lag_events{slug="flaky"}`),
			metricValue(text, `foldstream_processor_lag_seconds{slug="flaky"}`),
			metricValue(text, `foldstream_processor_stream_lag_events{slug="flaky",stream="/f"}`),
			metricValue(text, `foldstream_processor_stream_lag_seconds{slug="flaky",stream="/f"}`)
	}
	if e, s, se, ss := lagOf(scrapeText(t, ts.URL)); e != 0 || s != 0 || se != 0 || ss != 0 {
		t.Fatalf("caught up: lag %v events %v s (stream: %v, %v), want 0", e, s, se, ss)
	}

	// The bad event and one after it, committed together at the clock's now.
	start := clk.Now()
	if _, err := st.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "bad"}, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	prev := -1.0
	for i, wait := range []time.Duration{0, host.FailRetryBase, 2 * host.FailRetryBase} {
		if wait > 0 {
			clk.Advance(wait)
			clk.WaitArmed(t, clk.Now().Add(2*wait)) // the retry failed again and backs off
		}
		text := scrapeText(t, ts.URL)
		e, s, se, ss := lagOf(text)
		want := clk.Now().Sub(start).Seconds()
		if e != 2 || se != 2 || s != want || ss != want {
			t.Fatalf("failing, %v after the bad event: lag %v events %v s (stream: %v, %v), want 2 events and %v s\n%s",
				clk.Now().Sub(start), e, s, se, ss, want, grepLines(text, "foldstream_processor_"))
		}
		if s <= prev {
			t.Fatalf("lag seconds %v after %v, not more than before", s, prev)
		}
		listedLagIs(t, ts.URL, "/f", "flaky", 2, want, start)
		prev = s
		if got := metricValue(text, `foldstream_processor_process_event_failures_total{code="PROCESS_EVENT_FAILED",slug="flaky"}`); got != float64(i+1) {
			t.Errorf("failures after %d attempts: %v", i+1, got)
		}
		if got := metricValue(text, `foldstream_processor_streams{slug="flaky",state="failing"}`); got != 1 {
			t.Errorf("streams failing: %v, want 1", got)
		}
	}

	broken.Store(false)
	clk.Advance(4 * host.FailRetryBase)
	eventually(t, "the retry to process the bad event", func() bool {
		for _, ps := range h.ProcessorsOn(ctx, "/f") {
			if ps.Slug == "flaky" {
				return ps.Failing == nil
			}
		}
		return false
	})
	info, err := st.Events().HeadStream(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/f", "flaky", info.Tail, 10*time.Second); err != nil {
		t.Fatalf("healed: %v", err)
	}
	text := scrapeText(t, ts.URL)
	if e, s, se, ss := lagOf(text); e != 0 || s != 0 || se != 0 || ss != 0 {
		t.Fatalf("healed: lag %v events %v s (stream: %v, %v), want 0\n%s", e, s, se, ss, grepLines(text, "foldstream_processor_"))
	}
	listedLagIs(t, ts.URL, "/f", "flaky", 0, 0, time.Time{})
	// The same through the registry, as client_golang's own test helpers read it.
	want := `# HELP foldstream_processor_lag_seconds Age of the oldest durable event the processor has not processed on any stream this node runs it on (its commit time to now), 0 when caught up.
# TYPE foldstream_processor_lag_seconds gauge
foldstream_processor_lag_seconds{slug="flaky"} 0
# HELP foldstream_processor_processed_events_total Events whose ProcessEvent returned without error and whose blockers settled (an event processed again after a retried range counts again).
# TYPE foldstream_processor_processed_events_total counter
foldstream_processor_processed_events_total{slug="flaky"} 3
# HELP foldstream_processor_process_event_failures_total Failed ProcessEvent calls (or their blockers), by the failure's code (PROCESS_EVENT_FAILED: an error without a code, or a panic).
# TYPE foldstream_processor_process_event_failures_total counter
foldstream_processor_process_event_failures_total{code="PROCESS_EVENT_FAILED",slug="flaky"} 3
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "foldstream_processor_lag_seconds",
		"foldstream_processor_processed_events_total", "foldstream_processor_process_event_failures_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil {
		t.Fatal(err)
	} else {
		for _, p := range problems {
			if strings.HasPrefix(p.Metric, "foldstream_") {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		}
	}
}

// Ephemeral live-state deltas take positions on a stream but are not events a processor owes:
// the lag in events counts durable events only.
func TestLagInEventsLeavesLiveStateDeltasOut(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(ctx, t.TempDir()+"/deltas.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	s := st.Events().Stream("/d")
	first, err := s.Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true}, foldtype.EventInput{Type: "delta", Ephemeral: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := st.Events().HeadStream(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	lag, err := st.Events().Lag(ctx, "/d", first[0].Offset, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lag.Events != 3 || lag.Estimated || lag.Oldest.IsZero() {
		t.Fatalf("lag after the first tick: %+v, want 3 durable events (the tail is %d positions on)", lag, info.Tail-first[0].Offset)
	}
	if info.Tail-first[0].Offset <= 3 {
		t.Fatalf("the deltas took no positions (tail %d): the test proves nothing", info.Tail)
	}
}

// On PostgreSQL the database pool's metrics exist and move, and two nodes count the lease that
// one hands over at shutdown and the other takes over.
func TestPoolAndLeaseMetricsOnPostgreSQL(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	url := pgtest.URL(t)
	type node struct {
		st *stream.Store
		h  *host.Host
		ts *httptest.Server
	}
	start := func(id string) node {
		st, err := storeopen.Open(ctx, url, storeopen.Config{Store: stream.Config{Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := host.New(st, host.Config{Logger: quiet, NodeID: id, LeaseTTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := host.Register(ctx, h, "/orders", newEcho()); err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet, Metrics: server.NewMetrics()}))
		t.Cleanup(func() {
			ts.Close()
			_ = h.Shutdown(context.Background())
			st.Close(context.Background())
		})
		return node{st, h, ts}
	}
	a := start("node-a")
	appendAndWait(t, a.st, a.h, "/orders", "echo", "add")
	text := scrapeText(t, a.ts.URL)
	for _, sample := range []string{"foldstream_db_pool_connections", "foldstream_db_pool_max_connections", "foldstream_db_pool_acquires_total"} {
		if got := metricValue(text, sample); got < 1 {
			t.Errorf("%s = %v, want at least 1", sample, got)
		}
	}
	for _, sample := range []string{"foldstream_db_pool_acquired_connections", "foldstream_db_pool_idle_connections",
		"foldstream_db_pool_acquire_waits_total", "foldstream_db_pool_acquire_wait_seconds_total", "foldstream_store_writer_queue"} {
		if got := metricValue(text, sample); got < 0 {
			t.Errorf("no %s", sample)
		}
	}
	if got := metricValue(text, "foldstream_leases_held"); got != 1 {
		t.Errorf("node a holds %v leases, want 1 (its processor's)", got)
	}

	b := start("node-b")
	if got := metricValue(scrapeText(t, b.ts.URL), "foldstream_leases_held"); got != 0 {
		t.Errorf("node b holds %v leases while node a runs the processor, want 0", got)
	}
	if err := a.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node b to take the processor over", func() bool { return b.h.LeaseTotals().Held == 1 })
	text = scrapeText(t, b.ts.URL)
	if got := metricValue(text, "foldstream_lease_takeovers_total"); got != 1 {
		t.Errorf("node b took over %v leases, want 1\n%s", got, grepLines(text, "foldstream_lease"))
	}
	if got := metricValue(scrapeText(t, a.ts.URL), "foldstream_lease_handovers_total"); got != 1 {
		t.Errorf("node a handed over %v leases, want 1", got)
	}
	appendAndWait(t, b.st, b.h, "/orders", "echo", "add")
	if got := metricValue(scrapeText(t, b.ts.URL), `foldstream_processor_processed_events_total{slug="echo"}`); got != 1 {
		t.Errorf("node b processed %v events, want 1 (the one after its takeover)", got)
	}
}

// listedLagIs checks the processor listing's lag of slug on path: events, seconds and the commit
// time of the oldest event it owes (the zero time: none).
func listedLagIs(t *testing.T, base, path, slug string, events int64, seconds float64, oldest time.Time) {
	t.Helper()
	for _, e := range processorList(t, base, "prefix="+url.QueryEscape(path)).Processors {
		if e.Stream != path || e.Slug != slug {
			continue
		}
		gotOldest := time.Time{}
		if e.OldestUnprocessed != nil {
			gotOldest = *e.OldestUnprocessed
		}
		if e.Lag != events || e.LagSeconds != seconds || !gotOldest.Equal(oldest.Truncate(time.Millisecond)) || e.LagEstimated || e.LagUnknown {
			t.Fatalf("listed %s on %s: lag %d events, %v s, oldest %v (estimated %v, unknown %v); want %d events, %v s, oldest %v",
				slug, path, e.Lag, e.LagSeconds, gotOldest, e.LagEstimated, e.LagUnknown, events, seconds, oldest)
		}
		return
	}
	t.Fatalf("%s on %s is not listed", slug, path)
}
