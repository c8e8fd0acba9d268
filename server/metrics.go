package server

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/foldstream/foldstream/console"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// Operations routes (docs/server.md#operations).
const (
	// HealthPath answers 200 while the process serves requests, without credentials.
	HealthPath = "/healthz"
	// ReadyPath answers 200 while the store answers too and its commits flow, and 503
	// UNAVAILABLE otherwise (or while the server shuts down), without credentials.
	ReadyPath = "/readyz"
	// MetricsPath serves the Prometheus metrics of Config.Metrics: a read (OpMetrics) like any
	// route, unless Config.MetricsElsewhere moves them to an address of their own.
	MetricsPath = "/metrics"
)

// ProcessorPather is implemented by a Processors that can list the streams it runs processors on
// now (*host.Host does). With ProcessorLister it feeds the per-processor metrics.
type ProcessorPather interface {
	// ProcessorPaths returns the paths of the streams processors run on now.
	ProcessorPaths() []string
}

// Metrics are a server's Prometheus metrics (docs/server.md#metrics): requests by route, method
// and status, response bytes, appends and their bytes, live readers, the store's group commits
// (size, duration, failures) and writer queue, the database pool on PostgreSQL and, with a host,
// its leases (held, taken over, handed over) and per processor slug the lag in durable events
// and in seconds, the streams by state, and counters of the events processed, skipped and
// emitted, the failures by code and a ProcessEvent duration histogram (series per stream only for
// exact-path registrations); plus the build, the Go runtime's and the process's own. Create one
// with NewMetrics, give it to one Server in Config.Metrics, and serve it at MetricsPath or, with
// Handler, on an address of its own.
type Metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.CounterVec
	durations     *prometheus.HistogramVec
	responseBytes *prometheus.CounterVec
	appends       prometheus.Counter
	appendBytes   prometheus.Counter
	commits       prometheus.Counter
	commitFails   prometheus.Counter
	commitWrites  prometheus.Histogram
	commitSeconds prometheus.Histogram

	bindOnce sync.Once
}

// NewMetrics returns metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldstream_http_requests_total",
			Help: "HTTP requests answered, by route (stream, processor, list, info, console, health, metrics, other), method and status code.",
		}, []string{"route", "method", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "foldstream_http_request_duration_seconds",
			Help: "Time from a request's arrival to the end of its answer, by route and method; live reads (long-poll and SSE), which wait by design, are not observed.",
			// 0.25 ms … ~33 s: a cached read on loopback to a write that waited out its deadline.
			Buckets: prometheus.ExponentialBuckets(0.00025, 2.5, 14),
		}, []string{"route", "method"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldstream_http_response_bytes_total",
			Help: "Bytes of HTTP response bodies written, by route.",
		}, []string{"route"}),
		appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "foldstream_appends_total",
			Help: "Appends (POSTs to a stream) the store acknowledged, duplicates of idempotent producers included.",
		}),
		appendBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "foldstream_append_bytes_total",
			Help: "Request-body bytes of the appends the store acknowledged, as received.",
		}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "foldstream_store_commits_total",
			Help: "Group commits of the store's writer (each one fsync on SQLite, one COMMIT on PostgreSQL).",
		}),
		commitFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "foldstream_store_commit_failures_total",
			Help: "Group commits that failed; none of their writes was acknowledged.",
		}),
		commitWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "foldstream_store_commit_writes",
			Help:    "Writes made durable by one group commit (the group-commit batch size).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10), // 1 … 512
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "foldstream_store_commit_seconds",
			Help:    "Duration of one group commit: the fsync of a SQLite file, the COMMIT round trip on PostgreSQL.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 0.1 ms … ~6 s
		}),
	}
	m.reg.MustRegister(m.requests, m.durations, m.responseBytes, m.appends, m.appendBytes, m.commits, m.commitFails,
		m.commitWrites, m.commitSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo())
	return m
}

// buildInfo is foldstream_build_info: 1, labelled with the module's version, the Go release and
// the VCS revision the binary was built from, so a dashboard can tell which build each node runs.
func buildInfo() prometheus.Collector {
	version, revision := "(devel)", "unknown"
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				revision = st.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "foldstream_build_info",
		Help:        "Always 1; its labels say which build of foldstream this process runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": goVersion, "revision": revision},
	}, func() float64 { return 1 })
}

// Registry returns the registry the metrics are on, to add an application's own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format, with no credentials asked: for
// an address of their own (Config.MetricsElsewhere; foldstream serve --metrics-addr).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// bind adds the metrics that read s: live readers, the store's commits and the processors. Only
// the first server given m is bound.
func (m *Metrics) bind(s *Server) {
	m.bindOnce.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "foldstream_live_readers",
			Help: "Long-poll and SSE readers connected now.",
		}, func() float64 { return float64(s.liveReaders.Load()) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "foldstream_store_commits_stalled",
			Help: "1 while the store's commits stall (the database cannot be reached, or a COMMIT waits longer than the store's CommitStallAfter) and /readyz answers 503, else 0.",
		}, func() float64 {
			stalled, _ := s.st.CommitsStalled()
			return boolGauge(stalled)
		}))
		s.stopObserving = s.st.ObserveCommits(func(c stream.CommitStats) {
			if c.Failed {
				m.commitFails.Inc()
				return
			}
			m.commits.Inc()
			m.commitWrites.Observe(float64(c.Writes))
			m.commitSeconds.Observe(c.Duration.Seconds())
		})
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "foldstream_store_writer_queue",
			Help: "Writes queued for the store's writer now, not yet taken into a group commit.",
		}, func() float64 { return float64(s.st.WriterQueue()) }))
		if ps := driver.CapabilitiesOf(s.st.Driver()).PoolStats; ps != nil {
			m.reg.MustRegister(poolCollector{ps})
		}
		pl, okL := s.cfg.Processors.(ProcessorLister)
		pp, okP := s.cfg.Processors.(ProcessorPather)
		if okL && okP {
			pc, _ := s.cfg.Processors.(ProcessorCounter)
			lg, _ := s.cfg.Processors.(ProcessorLagger)
			m.reg.MustRegister(&processorCollector{st: s.st, lister: pl, paths: pp, counter: pc, lagger: lg})
		}
		if lc, ok := s.cfg.Processors.(LeaseCounter); ok {
			m.reg.MustRegister(leaseCollector{lc})
		}
		if pc, ok := s.cfg.Processors.(ParkedCounter); ok {
			m.reg.MustRegister(parkedCollector{pc, s.log})
		}
	})
}

// request counts one answered request that took d; live reads (long-poll, SSE) count without
// their duration.
func (m *Metrics) request(route, method string, status int, bytes int64, d time.Duration, live bool) {
	if m == nil {
		return
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	if !live {
		m.durations.WithLabelValues(route, method).Observe(d.Seconds())
	}
	if bytes > 0 {
		m.responseBytes.WithLabelValues(route).Add(float64(bytes))
	}
}

// appended counts one acknowledged append whose request body had n bytes.
func (m *Metrics) appended(n int) {
	if m == nil {
		return
	}
	m.appends.Inc()
	m.appendBytes.Add(float64(n))
}

// routeOf names the route of a request path for the request metrics (a small, fixed set).
func (s *Server) routeOf(p string) string {
	switch {
	case p == HealthPath || p == ReadyPath:
		return "health"
	case p == MetricsPath:
		return "metrics"
	case s.cfg.Processors != nil && strings.HasPrefix(p, s.cfg.ProcessorPrefix):
		return "processor"
	case strings.HasPrefix(p, s.cfg.Prefix):
		return "stream"
	case p == ListPath:
		return "list"
	case p == InfoPath:
		return "info"
	case console.Serves(p):
		return "console"
	}
	return "other"
}

// ProcessorCounter is implemented by a Processors that keeps running totals per processor slug
// (*host.Host does): the counters and the ProcessEvent duration histogram of the metrics, and a
// slug's lag series while it is registered, come from it.
type ProcessorCounter interface {
	// ProcessorTotals returns the totals of every registered processor slug.
	ProcessorTotals() []foldtype.ProcessorTotals
}

// ProcessorLagger is implemented by a Processors that knows which events each processor consumes
// (*host.Host does): a processor's lag counts the durable events it consumes after its offset.
// Without it the lag counts every durable event after the offset.
type ProcessorLagger interface {
	// ProcessorLag returns what processor slug on path has yet to process after offset after.
	ProcessorLag(ctx context.Context, path, slug string, after int64) (stream.Lag, error)
}

// LeaseCounter is implemented by a Processors that runs processors under leases (*host.Host
// does): the leases it holds, and its takeovers and hand-overs.
type LeaseCounter interface {
	// LeaseTotals returns the leases held now and the takeovers and hand-overs so far.
	LeaseTotals() foldtype.LeaseTotals
}

var (
	processorOffsetDesc = prometheus.NewDesc("foldstream_processor_offset",
		"Offset the processor reduced through, by processor slug and stream path (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorStreamLagEventsDesc = prometheus.NewDesc("foldstream_processor_stream_lag_events",
		"Durable events after the processor's offset on its stream, live-state deltas not counted (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorStreamLagSecondsDesc = prometheus.NewDesc("foldstream_processor_stream_lag_seconds",
		"Age of the oldest durable event the processor has not processed on its stream (its commit time to now), 0 when caught up (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorParkedDesc = prometheus.NewDesc("foldstream_processor_parked",
		"1 while the processor is parked on an error it cannot retry past (docs/server.md#processors-over-http), else 0 (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorWorkFailedDesc = prometheus.NewDesc("foldstream_processor_work_failed",
		"1 while the processor's background work failed for good (PERMANENT_FAILURE; docs/engine.md#work-that-keeps-dying), else 0 (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorFailingDesc = prometheus.NewDesc("foldstream_processor_failing",
		"1 while the processor's ProcessEvent keeps failing on one event and the host retries it with backoff (PROCESSOR_FAILING), else 0 (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorAttemptsDesc = prometheus.NewDesc("foldstream_processor_failed_attempts",
		"Failed attempts in a row of a failing processor on its event; 0 while it runs (exact-path registrations only).", []string{"slug", "stream"}, nil)
	processorOpenDesc = prometheus.NewDesc("foldstream_processor_open",
		"1 while the host holds the processor's engine open, else 0 (exact-path registrations only).", []string{"slug", "stream"}, nil)

	processorLagEventsDesc = prometheus.NewDesc("foldstream_processor_lag_events",
		"Durable events the processor has not processed yet, summed over the streams this node runs it on (live-state deltas not counted).", []string{"slug"}, nil)
	processorLagSecondsDesc = prometheus.NewDesc("foldstream_processor_lag_seconds",
		"Age of the oldest durable event the processor has not processed on any stream this node runs it on (its commit time to now), 0 when caught up.", []string{"slug"}, nil)
	processorStreamsDesc = prometheus.NewDesc("foldstream_processor_streams",
		"Streams this node reports the processor on, by state (running, catching_up, failing, parked, idle, unowned).", []string{"slug", "state"}, nil)
	processorProcessedDesc = prometheus.NewDesc("foldstream_processor_processed_events_total",
		"Events whose ProcessEvent returned without error and whose blockers settled (an event processed again after a retried range counts again).", []string{"slug"}, nil)
	processorEmittedDesc = prometheus.NewDesc("foldstream_processor_emitted_events_total",
		"Events the processor's ProcessEvent calls and blockers appended.", []string{"slug"}, nil)
	processorSkippedDesc = prometheus.NewDesc("foldstream_processor_skipped_events_total",
		"Events the processor skipped, by reason (processor.reduce.payload: the payload breaks the schema; processor.reduce: Reduce failed or panicked).", []string{"slug", "reason"}, nil)
	processorFailuresDesc = prometheus.NewDesc("foldstream_processor_process_event_failures_total",
		"Failed ProcessEvent calls (or their blockers), by the failure's code (PROCESS_EVENT_FAILED: an error without a code, or a panic).", []string{"slug", "code"}, nil)
	processorDurationDesc = prometheus.NewDesc("foldstream_processor_process_event_duration_seconds",
		"Duration of one ProcessEvent call that succeeded, its blockers included.", []string{"slug"}, nil)

	leasesHeldDesc = prometheus.NewDesc("foldstream_leases_held",
		"Processor leases this node holds now (the processors it runs).", nil, nil)
	leaseTakeoversDesc = prometheus.NewDesc("foldstream_lease_takeovers_total",
		"Processor leases this node acquired that another node held last, as this node last saw the lease table.", nil, nil)
	leaseHandoversDesc = prometheus.NewDesc("foldstream_lease_handovers_total",
		"Processor leases this node gave up for another node to take (to the node preferred for it, at shutdown, at removal); none on an exclusive SQLite store.", nil, nil)
)

// processorStates are the states foldstream_processor_streams reports, each slug with all of them.
var processorStates = []string{foldtype.StateRunning, foldtype.StateCatchingUp, foldtype.StateFailing,
	foldtype.StateParked, foldtype.StateIdle, foldtype.StateUnowned}

// processorCollector reports the processors at scrape time, through the host's read-only status
// (ProcessorPaths, ProcessorsOn), its running totals (ProcessorTotals) and the streams' heads.
//
// Its cardinality is bounded by the registrations, never by the streams a pattern matches
// (docs/server.md#metrics): series per (slug, stream) only for exact-path registrations; a
// pattern's streams add to its slug's aggregates alone.
type processorCollector struct {
	st      *stream.Store
	lister  ProcessorLister
	paths   ProcessorPather
	counter ProcessorCounter // nil: no totals
	lagger  ProcessorLagger  // nil: lag counts every durable event
}

func (c *processorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{processorOffsetDesc, processorStreamLagEventsDesc, processorStreamLagSecondsDesc,
		processorParkedDesc, processorWorkFailedDesc, processorFailingDesc, processorAttemptsDesc, processorOpenDesc,
		processorLagEventsDesc, processorLagSecondsDesc, processorStreamsDesc} {
		ch <- d
	}
	if c.counter != nil {
		for _, d := range []*prometheus.Desc{processorProcessedDesc, processorEmittedDesc, processorSkippedDesc,
			processorFailuresDesc, processorDurationDesc} {
			ch <- d
		}
	}
}

// slugLag is one slug's aggregates over the streams this node reports it on.
type slugLag struct {
	events  int64
	seconds float64
	states  map[string]int
}

func (c *processorCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := c.st.Clock().Now()
	slugs := map[string]*slugLag{}
	slugOf := func(slug string) *slugLag {
		a := slugs[slug]
		if a == nil {
			a = &slugLag{states: map[string]int{}}
			slugs[slug] = a
		}
		return a
	}
	var totals []foldtype.ProcessorTotals
	if c.counter != nil {
		totals = c.counter.ProcessorTotals()
		for _, t := range totals {
			slugOf(t.Slug) // a registered slug has its series, streams or not
		}
	}
	for _, path := range c.paths.ProcessorPaths() {
		statuses := c.lister.ProcessorsOn(ctx, path)
		if len(statuses) == 0 {
			continue
		}
		info, headErr := c.st.Protocol().HeadStream(ctx, path)
		for _, ps := range statuses {
			exact := ps.Pattern == "" || ps.Pattern == path
			// Each node counts in its slug aggregates the streams it runs; a stream no node runs
			// now is counted by every node that reports it, so that its lag shows somewhere.
			mine := ps.Local || ps.Owner == ""
			if !exact && !mine {
				continue
			}
			var lag stream.Lag
			lagKnown := headErr == nil
			if lagKnown && ps.Offset < info.Tail {
				var err error
				if lag, err = processorLag(ctx, c.st, c.lagger, path, ps.Slug, ps.Offset); err != nil {
					lagKnown = false
				}
			}
			secs := lagSeconds(lag, now)
			if mine {
				a := slugOf(ps.Slug)
				a.events += lag.Events
				a.seconds = max(a.seconds, secs)
				if ps.State != "" {
					a.states[ps.State]++
				}
			}
			if !exact {
				continue
			}
			ch <- prometheus.MustNewConstMetric(processorOffsetDesc, prometheus.GaugeValue, float64(ps.Offset), ps.Slug, path)
			if lagKnown {
				ch <- prometheus.MustNewConstMetric(processorStreamLagEventsDesc, prometheus.GaugeValue, float64(lag.Events), ps.Slug, path)
				ch <- prometheus.MustNewConstMetric(processorStreamLagSecondsDesc, prometheus.GaugeValue, secs, ps.Slug, path)
			}
			ch <- prometheus.MustNewConstMetric(processorParkedDesc, prometheus.GaugeValue, boolGauge(ps.Parked != nil), ps.Slug, path)
			ch <- prometheus.MustNewConstMetric(processorWorkFailedDesc, prometheus.GaugeValue, boolGauge(ps.WorkFailed != nil), ps.Slug, path)
			attempts := 0
			if ps.Failing != nil {
				attempts = ps.Failing.Attempts
			}
			ch <- prometheus.MustNewConstMetric(processorFailingDesc, prometheus.GaugeValue, boolGauge(ps.Failing != nil), ps.Slug, path)
			ch <- prometheus.MustNewConstMetric(processorAttemptsDesc, prometheus.GaugeValue, float64(attempts), ps.Slug, path)
			ch <- prometheus.MustNewConstMetric(processorOpenDesc, prometheus.GaugeValue, boolGauge(ps.Open), ps.Slug, path)
		}
	}
	for slug, a := range slugs {
		ch <- prometheus.MustNewConstMetric(processorLagEventsDesc, prometheus.GaugeValue, float64(a.events), slug)
		ch <- prometheus.MustNewConstMetric(processorLagSecondsDesc, prometheus.GaugeValue, a.seconds, slug)
		for _, state := range processorStates {
			ch <- prometheus.MustNewConstMetric(processorStreamsDesc, prometheus.GaugeValue, float64(a.states[state]), slug, state)
		}
	}
	for _, t := range totals {
		ch <- prometheus.MustNewConstMetric(processorProcessedDesc, prometheus.CounterValue, float64(t.Processed), t.Slug)
		ch <- prometheus.MustNewConstMetric(processorEmittedDesc, prometheus.CounterValue, float64(t.Emitted), t.Slug)
		for reason, n := range t.Skipped {
			ch <- prometheus.MustNewConstMetric(processorSkippedDesc, prometheus.CounterValue, float64(n), t.Slug, reason)
		}
		for code, n := range t.Failures {
			ch <- prometheus.MustNewConstMetric(processorFailuresDesc, prometheus.CounterValue, float64(n), t.Slug, string(code))
		}
		buckets := make(map[float64]uint64, len(foldtype.ProcessEventBuckets))
		for i, le := range foldtype.ProcessEventBuckets {
			if i < len(t.DurationBuckets) {
				buckets[le] = t.DurationBuckets[i]
			}
		}
		ch <- prometheus.MustNewConstHistogram(processorDurationDesc, t.DurationCount, t.DurationSum, buckets, t.Slug)
	}
}

// ParkedCounter is implemented by a Processors that keeps parked events (*host.Host does): how
// many are parked, by slug, read from the database at scrape time.
type ParkedCounter interface {
	ParkedEventCounts(ctx context.Context) (map[string]int, error)
}

var processorParkedEventsDesc = prometheus.NewDesc("foldstream_processor_parked_events",
	"Events set aside by a skip and not yet redriven or discarded, by processor slug, over the whole cluster (the same on every node: aggregate with max, not sum).", []string{"slug"}, nil)

// parkedCollector reports the parked events at scrape time: one grouped count of a small table.
type parkedCollector struct {
	pc  ParkedCounter
	log *slog.Logger
}

func (c parkedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- processorParkedEventsDesc }

func (c parkedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.pc.ParkedEventCounts(ctx)
	if err != nil {
		c.log.Warn("metrics: counting parked events failed", "err", err)
		return
	}
	for slug, n := range counts {
		ch <- prometheus.MustNewConstMetric(processorParkedEventsDesc, prometheus.GaugeValue, float64(n), slug)
	}
}

// leaseCollector reports the host's leases at scrape time.
type leaseCollector struct{ lc LeaseCounter }

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leasesHeldDesc
	ch <- leaseTakeoversDesc
	ch <- leaseHandoversDesc
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.lc.LeaseTotals()
	ch <- prometheus.MustNewConstMetric(leasesHeldDesc, prometheus.GaugeValue, float64(t.Held))
	ch <- prometheus.MustNewConstMetric(leaseTakeoversDesc, prometheus.CounterValue, float64(t.Takeovers))
	ch <- prometheus.MustNewConstMetric(leaseHandoversDesc, prometheus.CounterValue, float64(t.Handovers))
}

var (
	poolAcquiredDesc = prometheus.NewDesc("foldstream_db_pool_acquired_connections",
		"Connections of the database pool in use now.", nil, nil)
	poolIdleDesc = prometheus.NewDesc("foldstream_db_pool_idle_connections",
		"Idle connections of the database pool now.", nil, nil)
	poolTotalDesc = prometheus.NewDesc("foldstream_db_pool_connections",
		"Connections of the database pool now, in use, idle or being opened.", nil, nil)
	poolMaxDesc = prometheus.NewDesc("foldstream_db_pool_max_connections",
		"The most connections the database pool opens.", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("foldstream_db_pool_acquires_total",
		"Connections handed out by the database pool.", nil, nil)
	poolWaitsDesc = prometheus.NewDesc("foldstream_db_pool_acquire_waits_total",
		"Connections handed out by the database pool after a wait (none was idle).", nil, nil)
	poolWaitSecondsDesc = prometheus.NewDesc("foldstream_db_pool_acquire_wait_seconds_total",
		"Time spent waiting for a connection of the database pool, in all.", nil, nil)
)

// poolCollector reports a shared database's connection pool at scrape time.
type poolCollector struct{ ps driver.PoolStatser }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquiredDesc, poolIdleDesc, poolTotalDesc, poolMaxDesc, poolAcquiresDesc, poolWaitsDesc, poolWaitSecondsDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.ps.PoolStats()
	ch <- prometheus.MustNewConstMetric(poolAcquiredDesc, prometheus.GaugeValue, float64(st.Acquired))
	ch <- prometheus.MustNewConstMetric(poolIdleDesc, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(poolTotalDesc, prometheus.GaugeValue, float64(st.Total))
	ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(st.Max))
	ch <- prometheus.MustNewConstMetric(poolAcquiresDesc, prometheus.CounterValue, float64(st.Acquires))
	ch <- prometheus.MustNewConstMetric(poolWaitsDesc, prometheus.CounterValue, float64(st.Waits))
	ch <- prometheus.MustNewConstMetric(poolWaitSecondsDesc, prometheus.CounterValue, st.WaitTime.Seconds())
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// serveHealth answers HealthPath and ReadyPath: GET or HEAD, no credentials, no Host check (load
// balancers probe by address). They reveal nothing but whether the server (and its store) answer.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if !readOnly(r.Method) {
		w.Header().Set("Allow", "GET, HEAD")
		writeCoded(w, foldtype.CodeMethodNotAllowed, "health routes only read: use GET", 0)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == ReadyPath {
		select {
		case <-s.stopping:
			writeCoded(w, foldtype.CodeUnavailable, "not ready: the server is shutting down", 1)
			return
		default:
		}
		if stalled, cause := s.st.CommitsStalled(); stalled {
			// The store logged the cause once when they began to stall; this answer's own line
			// carries its request id, as every withheld detail's does.
			s.log.Warn("not ready: the store's commits stall", "requestId", w.Header().Get(HeaderRequestID), "err", cause)
			writeCoded(w, foldtype.CodeUnavailable, "not ready: the store's commits stall", 1)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := s.st.Protocol().ListStreams(ctx, stream.ListOptions{Limit: 1}); err != nil {
			s.log.Warn("not ready: the store does not answer", "requestId", w.Header().Get(HeaderRequestID), "err", err)
			writeCoded(w, foldtype.CodeUnavailable, "not ready: the store does not answer", 1)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte("ok\n"))
	}
}

// serveMetrics answers MetricsPath: a read like any route (OpMetrics on "/").
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !readOnly(r.Method) {
		w.Header().Set("Allow", "GET, HEAD")
		writeCoded(w, foldtype.CodeMethodNotAllowed, "metrics only read: use GET", 0)
		return
	}
	if !s.checkOrigin(w, r, OpMetrics) {
		return
	}
	if _, ok := s.authorize(w, r, OpMetrics, "/"); !ok {
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}
