// Package server is foldstream's Durable Streams HTTP server: an http.Handler that serves the
// protocol (create, append, close, delete, metadata, catch-up, long-poll and SSE reads, forks,
// TTLs, idempotent producers) over a [stream.Store].
//
// Construction is one call, so tests and benchmarks can run it in-process:
//
//	st, _ := storeopen.Open(context.Background(), "foldstream.db", storeopen.Config{})
//	h, err := server.New(st, server.Config{LongPollTimeout: 500 * time.Millisecond})
//	if err != nil {
//		return err
//	}
//	http.ListenAndServe("127.0.0.1:4437", h)
//
// Streams live under Config.Prefix (default "/v1/stream/"): the URL path /v1/stream/orders/42 is
// the store path "/orders/42" — the path a processor registers on with package host. See
// docs/server.md for routes and examples.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/console"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/subscriptions"
)

// Defaults of Config.
const (
	// DefaultPrefix is where streams are served.
	DefaultPrefix = "/v1/stream/"
	// DefaultProcessorPrefix is where processors are served (when Config.Processors is set).
	DefaultProcessorPrefix = wire.ProcessorPrefix
	// DefaultLongPollTimeout is how long a long-poll waits for data, and the SSE keep-alive
	// interval. 20 s stays below common proxy idle timeouts (30–60 s); the conformance suite
	// runs with 500 ms.
	DefaultLongPollTimeout = 20 * time.Second
	// DefaultSSEMaxDuration is how long an SSE connection lives before the server closes it so
	// the client reconnects from its last offset (this lets a CDN collapse the requests of many
	// readers into one; docs/server.md#streams).
	DefaultSSEMaxDuration = 60 * time.Second
	// DefaultMaxBodyBytes caps a request body; larger bodies get 413.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultReadChunkBytes is the page a catch-up read takes from the store: a catch-up GET
	// writes page after page up to the tail (docs/server.md#catch-up-reads), so it bounds the
	// memory such a read holds.
	DefaultReadChunkBytes = 1 << 20
	// DefaultLiveChunkBytes caps the data of one long-poll answer or SSE data event, so a live
	// reader holds kilobytes, not megabytes.
	DefaultLiveChunkBytes = 64 << 10
	// DefaultWriteTimeout bounds every write of a live response (long-poll, SSE): a client that
	// stops reading is cut after it.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultBodyReadTimeout bounds the reading of a request body: a body still arriving after
	// it is cut (408).
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultMaxLiveReaders caps concurrent live readers (long-poll, SSE, live-state SSE); past
	// it, 503 OVERLOADED with Retry-After.
	DefaultMaxLiveReaders = 2048
	// DefaultMaxBodyBytesInFlight caps the request-body bytes all requests hold at once; past
	// it, 503 OVERLOADED with Retry-After.
	DefaultMaxBodyBytesInFlight = 64 << 20
	// DefaultMaxConnections caps open connections (LimitListener, HTTPServer); past it new
	// connections are answered 503 and closed.
	DefaultMaxConnections = 4096
	// DefaultHeaderReadTimeout bounds the reading of request headers (HTTPServer).
	DefaultHeaderReadTimeout = 10 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle this long (HTTPServer).
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultProcessorWaitTimeout bounds a processor route's wait for the processor to catch up
	// (the read-your-writes wait of a snapshot, and waitUntilProcessed without timeout): 504
	// with the processor's offset after it.
	DefaultProcessorWaitTimeout = 10 * time.Second
)

// Config configures a Server. The zero value is valid: every field documents its default. The
// zero value is also the safe posture: no origin but the server's own may write from a browser,
// and on a loopback connection only loopback host names are answered (docs/server.md#security).
type Config struct {
	// TracerProvider, when set, traces every request (docs/server.md#tracing): one server span per
	// request, the child of the W3C trace context the request carries (traceparent), and, when
	// that span records, a child span per append covering the store's commit. A request its
	// sampler does not sample costs the sampling decision and little else. Defaults to nil: no
	// spans and no cost.
	TracerProvider trace.TracerProvider
	// AccessLog logs one line per answered request at Info (method, path, query, status, bytes,
	// duration and X-Request-Id) instead of at Debug. Defaults to false.
	AccessLog bool
	// Prefix is the URL path streams are served under; it must start and end with "/".
	// Defaults to DefaultPrefix ("/v1/stream/").
	Prefix string
	// LongPollTimeout is how long a long-poll read waits, and the SSE keep-alive interval.
	// Defaults to DefaultLongPollTimeout (20 s).
	LongPollTimeout time.Duration
	// SSEMaxDuration is the lifetime of one SSE connection. Defaults to DefaultSSEMaxDuration
	// (60 s).
	SSEMaxDuration time.Duration
	// MaxBodyBytes caps request bodies (413 beyond). Defaults to DefaultMaxBodyBytes (8 MiB).
	MaxBodyBytes int64
	// ReadChunkBytes is the page size of catch-up reads (see DefaultReadChunkBytes). Defaults to
	// DefaultReadChunkBytes (1 MiB).
	ReadChunkBytes int
	// LiveChunkBytes caps one long-poll answer or SSE data event. Defaults to
	// DefaultLiveChunkBytes (64 KiB).
	LiveChunkBytes int
	// Clock is the time source of the cursor rule (docs/server.md#streams). Defaults to the
	// store's clock.
	Clock foldtype.Clock
	// Logger receives one debug line per request and errors. Defaults to slog.Default().
	Logger *slog.Logger
	// Processors, when set, serves processor snapshots, live-state seeds and live-state deltas
	// under ProcessorPrefix (see processors.go). A *host.Host is one.
	Processors Processors
	// ProcessorPrefix is where processors are served. Defaults to DefaultProcessorPrefix
	// ("/v1/processor/").
	ProcessorPrefix string
	// ProcessorWaitTimeout bounds how long a processor route waits for the processor to catch
	// up. Defaults to DefaultProcessorWaitTimeout (10 s).
	ProcessorWaitTimeout time.Duration

	// Authorize, when set, decides every request (docs/server.md#authorization); BearerTokens
	// is a built-in one. nil lets every request through anonymously.
	Authorize AuthorizeFunc
	// AllowedOrigins lists the browser origins (such as "https://app.example.com") whose pages
	// may write — append, create, delete; "*" allows every origin. A page of the server's own
	// origin may always write, and requests without an Origin header (programs, curl) are not
	// concerned. By default no other origin may write (docs/server.md#browsers-and-origins).
	AllowedOrigins []string
	// RestrictReadOrigins limits browser reads to AllowedOrigins (and the server's own origin)
	// too. By default a page of any origin may read: Durable Streams readers in web pages need
	// it.
	RestrictReadOrigins bool
	// AllowedHosts lists the host names (without port) the server answers to, such as
	// "streams.example.com" or "*.example.com"; "*" answers every name. When empty, a request
	// that arrived on a loopback address must name a loopback host (localhost, *.localhost,
	// 127.0.0.0/8, ::1), which defeats DNS rebinding; requests on other addresses are answered
	// whatever their host (docs/server.md#host-names).
	AllowedHosts []string
	// PublicBaseURL ("https://streams.example.com") is the scheme and authority of the
	// Location of a created stream, and the server's own origin behind a proxy. When empty, the
	// request's own host is used if it was checked (AllowedHosts, or a loopback name), and
	// otherwise Location is a path.
	PublicBaseURL string

	// WriteTimeout bounds each write of a live response; a client that stops reading is cut
	// after it. Defaults to DefaultWriteTimeout (10 s).
	WriteTimeout time.Duration
	// BodyReadTimeout bounds the reading of one request body (408 after it). Defaults to
	// DefaultBodyReadTimeout (30 s); negative disables.
	BodyReadTimeout time.Duration
	// MaxLiveReaders caps concurrent live readers (503 OVERLOADED beyond). Defaults to
	// DefaultMaxLiveReaders (2048); negative disables.
	MaxLiveReaders int
	// MaxBodyBytesInFlight caps the request-body bytes held at once by all requests (503
	// OVERLOADED beyond). Defaults to DefaultMaxBodyBytesInFlight (64 MiB); negative disables.
	MaxBodyBytesInFlight int64
	// MaxConnections caps open connections through LimitListener and HTTPServer (503 beyond).
	// Defaults to DefaultMaxConnections (4096); negative disables.
	MaxConnections int
	// HeaderReadTimeout bounds the reading of request headers (HTTPServer). Defaults to
	// DefaultHeaderReadTimeout (10 s).
	HeaderReadTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (HTTPServer). Defaults to
	// DefaultIdleTimeout (2 min).
	IdleTimeout time.Duration

	// Metrics, when set, records the server's Prometheus metrics (NewMetrics;
	// docs/server.md#metrics) and serves them at MetricsPath, to requests allowed OpMetrics (a
	// read token). One Metrics serves one Server.
	Metrics *Metrics
	// MetricsElsewhere keeps MetricsPath off this handler: the operator serves
	// Metrics.Handler() on an address of its own (foldstream serve --metrics-addr).
	MetricsElsewhere bool
	// AllowLoopbackWebhooks lets webhook subscriptions target loopback addresses (localhost,
	// 127.0.0.0/8, ::1), over http too: for development and tests, where receivers run on the same
	// machine. Private, link-local and other local network targets are refused regardless
	// (docs/server.md#webhook-url-validation). The server only admits the URLs; the delivery
	// loop that sends the webhooks (subscriptions.StartDelivery, started by package node) needs
	// the same setting to connect to them.
	AllowLoopbackWebhooks bool

	// DisableConsole turns off the read-only web console served at "/" and under "/console/"
	// (docs/console.md). The stream listing routes stay.
	DisableConsole bool
}

// Check reports a configuration that cannot work: a PublicBaseURL that is not an http or https
// URL with a host, an origin that is not "*" or scheme://host[:port], a host name with a port.
// [New] calls it and refuses such a configuration; a program may call it earlier, to refuse bad
// flags before it opens the store.
func (c Config) Check() error {
	if c.PublicBaseURL != "" {
		if _, err := parseBaseURL(c.PublicBaseURL); err != nil {
			return err
		}
	}
	for _, o := range c.AllowedOrigins {
		if o != "*" && !validOrigin(o) {
			return fmt.Errorf("allowed origin %q: use scheme://host[:port], like https://app.example.com, or *", o)
		}
	}
	for _, h := range c.AllowedHosts {
		name := strings.TrimPrefix(h, "*.")
		if h != "*" && net.ParseIP(name) == nil && hostName(name) != strings.ToLower(name) {
			return fmt.Errorf("allowed host %q: give a host name without port or scheme, like streams.example.com or *.example.com", h)
		}
	}
	return nil
}

func parseBaseURL(v string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSuffix(v, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("public base URL %q: use http(s)://host[:port][/path]", v)
	}
	return u, nil
}

// validOrigin reports whether o is a serialized origin scheme://host[:port].
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Path == "" &&
		u.User == nil && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery && hostName(u.Host) != ""
}

// Server is the Durable Streams HTTP handler over one [stream.Store] (docs/server.md). It is an
// http.Handler; all its methods are safe for concurrent use.
//
// Create it with [New] (which refuses a configuration [Config.Check] rejects), and serve it with the
// bounds it expects: srv := s.HTTPServer(); srv.Serve(s.LimitListener(ln)). It serves the
// protocol's routes under Config.Prefix — create, append (JSON and bytes, idempotent producers,
// offset and sequence preconditions), close, delete, metadata, catch-up, long-poll and SSE reads,
// forks and TTLs — plus the stream listing, stream information, processor reads when
// Config.Processors is set (a host), and the read-only web console.
//
// Every answer it refuses carries its code from the catalogue in the Foldstream-Error-Code header
// (4xx for what the caller can fix, 503 with Retry-After when the database is unavailable or a
// limit is reached, 507 on a full disk); a write is acknowledged only after the store committed
// it. Requests are bounded — body size, bytes in flight, live readers, connections, timeouts —
// and Config.Authorize decides who may read and write. [Server.Shutdown] makes long-polls and SSE
// connections end at once during a graceful http.Server shutdown; the store stays open.
type Server struct {
	st     *stream.Store
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer // nil: no spans (Config.TracerProvider)
	// accessLevel is the level of the one line logged per request: Info with Config.AccessLog,
	// else Debug.
	accessLevel slog.Level

	stopOnce sync.Once
	stopping chan struct{} // closed by Shutdown

	publicBase  *url.URL // parsed Config.PublicBaseURL, or nil
	liveReaders atomic.Int64
	bodyBytes   atomic.Int64

	console *console.Handler // nil with Config.DisableConsole

	metrics        *Metrics             // Config.Metrics, or nil
	metricsHandler http.Handler         // serves MetricsPath, or nil
	stopObserving  func()               // ends the store's commit observation of the metrics, or nil
	subs           *subscriptions.Store // the subscription APIs' state (subscriptions.go)
	live           liveHubs             // live-state delta fan-out to SSE readers (livehub.go)
	stamps         stamps               // each principal's provenance, marshalled once (provenance.go)
}

var _ http.Handler = (*Server)(nil)

// New returns a Server serving st with cfg, after checking cfg ([Config.Check]): a configuration
// that cannot work is refused with code INVALID_CONFIG and nothing is started.
func New(st *stream.Store, cfg Config) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, &foldtype.Error{Code: foldtype.CodeInvalidConfig, Message: "server: " + err.Error(), Err: err}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(cfg.Prefix, "/") {
		cfg.Prefix = "/" + cfg.Prefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.ProcessorPrefix == "" {
		cfg.ProcessorPrefix = DefaultProcessorPrefix
	}
	if !strings.HasSuffix(cfg.ProcessorPrefix, "/") {
		cfg.ProcessorPrefix += "/"
	}
	if cfg.LongPollTimeout <= 0 {
		cfg.LongPollTimeout = DefaultLongPollTimeout
	}
	if cfg.SSEMaxDuration <= 0 {
		cfg.SSEMaxDuration = DefaultSSEMaxDuration
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ReadChunkBytes <= 0 {
		cfg.ReadChunkBytes = DefaultReadChunkBytes
	}
	if cfg.LiveChunkBytes <= 0 {
		cfg.LiveChunkBytes = DefaultLiveChunkBytes
	}
	if cfg.ProcessorWaitTimeout <= 0 {
		cfg.ProcessorWaitTimeout = DefaultProcessorWaitTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.MaxLiveReaders == 0 {
		cfg.MaxLiveReaders = DefaultMaxLiveReaders
	}
	if cfg.MaxBodyBytesInFlight == 0 {
		cfg.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	if cfg.MaxBodyBytesInFlight > 0 && cfg.MaxBodyBytesInFlight < cfg.MaxBodyBytes {
		cfg.MaxBodyBytesInFlight = cfg.MaxBodyBytes // one largest body must always fit
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.HeaderReadTimeout <= 0 {
		cfg.HeaderReadTimeout = DefaultHeaderReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = st.Clock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	srv := &Server{st: st, cfg: cfg, log: cfg.Logger, stopping: make(chan struct{})}
	if cfg.TracerProvider != nil {
		srv.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	srv.accessLevel = slog.LevelDebug
	if cfg.AccessLog {
		srv.accessLevel = slog.LevelInfo
	}
	srv.subs = subscriptions.New(st)
	if !cfg.DisableConsole {
		cc := console.Config{StreamPrefix: cfg.Prefix, ListPath: ListPath, InfoPath: InfoPath}
		if cfg.Processors != nil {
			cc.ProcessorPrefix = cfg.ProcessorPrefix
			cc.ProcessorsPath = ProcessorsPath
		}
		srv.console = console.New(cc)
	}
	if cfg.Metrics != nil {
		srv.metrics = cfg.Metrics
		cfg.Metrics.bind(srv)
		if !cfg.MetricsElsewhere {
			srv.metricsHandler = cfg.Metrics.Handler()
		}
	}
	if cfg.PublicBaseURL != "" {
		if u, err := parseBaseURL(cfg.PublicBaseURL); err == nil {
			srv.publicBase = u
		} else {
			srv.log.Error("server: ignoring the public base URL", "err", err)
		}
	}
	return srv, nil
}

// HTTPServer returns an http.Server for s with the bounds of Config: HeaderReadTimeout,
// IdleTimeout, 64 KiB of headers at most, Shutdown registered so a graceful shutdown ends live
// reads at once. Serve it with srv.Serve(s.LimitListener(ln)) to apply MaxConnections.
func (s *Server) HTTPServer() *http.Server {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.HeaderReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(func() { _ = s.Shutdown(context.Background()) })
	return srv
}

// Shutdown makes waiting reads end promptly: long-polls answer their timeout response and SSE
// connections close (clients resume from their last offset). Other requests are still served.
// It only signals and returns at once: ctx bounds nothing and the error is always nil; the shape
// is host.Shutdown's, so a program shuts both down alike. [Server.HTTPServer] registers it with
// http.Server.RegisterOnShutdown so a graceful shutdown does not wait for those reads.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		close(s.stopping)
		if s.stopObserving != nil {
			s.stopObserving()
		}
	})
	return nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	id := requestID(r)
	var span trace.Span
	if s.tracer != nil {
		r, span = s.startRequestSpan(r)
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("request panicked", "requestId", id, "method", r.Method, "path", r.URL.Path, "panic", p)
			if !rec.wrote {
				writeError(rec, http.StatusInternalServerError, "internal error")
			}
		}
		if span != nil {
			s.endRequestSpan(span, r, id, rec.status)
		}
		if s.metrics != nil {
			live := r.Method == http.MethodGet && r.URL.Query().Has("live")
			s.metrics.request(s.routeOf(r.URL.Path), r.Method, rec.status, rec.bytes, time.Since(start), live)
		}
		if lvl := s.accessLevel; s.log.Enabled(r.Context(), lvl) {
			s.log.Log(r.Context(), lvl, "request", "requestId", id, "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
				"status", rec.status, "bytes", rec.bytes, "duration", time.Since(start))
		}
	}()
	setCommonHeaders(rec.Header(), id)
	s.route(rec, r)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p == HealthPath || p == ReadyPath {
		s.serveHealth(w, r)
		return
	}
	if !s.hostAllowed(r) {
		s.refuseHost(w, r)
		return
	}
	if r.Method == http.MethodOptions {
		s.preflight(w, r)
		return
	}
	p := r.URL.Path
	switch {
	case p == MetricsPath && s.metricsHandler != nil:
		s.serveMetrics(w, r)
		return
	case s.cfg.Processors != nil && strings.HasPrefix(p, s.cfg.ProcessorPrefix):
		s.serveProcessor(w, r, strings.TrimPrefix(p, s.cfg.ProcessorPrefix))
		return
	case s.servesExtra(p):
		s.serveExtra(w, r)
		return
	case strings.HasPrefix(p, s.cfg.Prefix):
	default:
		writeError(w, http.StatusNotFound, "no route for this path; streams are under "+s.cfg.Prefix)
		return
	}
	name := strings.TrimPrefix(p, s.cfg.Prefix)
	// Reserved subscription APIs are routed before streams so they can never be created as
	// streams (docs/server.md#subscriptions).
	if rest, ok := strings.CutPrefix(name, "__ds/"); ok || name == "__ds" {
		s.serveReserved(w, r, rest)
		return
	}
	op := methodOp(r.Method)
	if op == "" {
		w.Header().Set("Allow", allowedMethods)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if name == "" {
		writeError(w, http.StatusNotFound, "name a stream after "+s.cfg.Prefix)
		return
	}
	// The store path is the URL path below the prefix with a leading slash: /v1/stream/orders
	// is the store path "/orders", the path processors register on.
	path := "/" + name
	if !s.checkOrigin(w, r, op) {
		return
	}
	principal, ok := s.authorize(w, r, op, path)
	if !ok {
		return
	}
	switch op {
	case OpCreate:
		s.handleCreate(w, r, path, principal)
	case OpAppend:
		s.handleAppend(w, r, path, principal)
	case OpRead:
		if r.Method == http.MethodHead {
			s.handleHead(w, r, path)
		} else {
			s.handleRead(w, r, path)
		}
	case OpDelete:
		s.handleDelete(w, r, path)
	}
}

const allowedMethods = "GET, POST, PUT, DELETE, HEAD, OPTIONS"

// setCommonHeaders sets the CORS and security headers every response carries
// (docs/server.md#browsers-and-origins), and its X-Request-Id, id.
func setCommonHeaders(h http.Header, id string) {
	// One allocation for the values of all of them (each slice capped at its one value, so an
	// Add to one of these headers copies instead of overwriting its neighbour); the keys are
	// already canonical.
	const n = len(commonHeaderValues)
	v := make([]string, n+1)
	copy(v, commonHeaderValues[:])
	for i, k := range commonHeaderKeys {
		h[k] = v[i : i+1 : i+1]
	}
	v[n] = id
	h[HeaderRequestID] = v[n : n+1 : n+1]
}

// commonHeaderKeys and commonHeaderValues are the headers setCommonHeaders puts on every answer.
var (
	commonHeaderKeys = [...]string{
		"X-Content-Type-Options",
		"Cross-Origin-Resource-Policy",
		"Access-Control-Allow-Origin",
		"Access-Control-Allow-Methods",
		"Access-Control-Allow-Headers",
		"Access-Control-Expose-Headers",
	}
	commonHeaderValues = [len(commonHeaderKeys)]string{
		"nosniff",
		"cross-origin",
		"*",
		allowedMethods,
		"Content-Type, Authorization, Stream-Seq, Stream-TTL, Stream-Expires-At, " +
			"Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, " +
			"Stream-Fork-Sub-Offset, If-None-Match, " + HeaderExpectedOffset,
		"Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, " +
			"Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, ETag, Content-Type, " +
			"Content-Encoding, Vary, Location, Stream-TTL, Stream-Expires-At, stream-sse-data-encoding, Retry-After, " +
			HeaderErrorCode + ", " + HeaderProcessorOffset + ", " + HeaderRequestID,
	}
)

// writeError answers an error in the problem shape (problem.go) with msg as its detail. Every
// error answer carries a code in Foldstream-Error-Code: the one set already (writeCoded,
// writeStoreError), else the status's general code (defaultCode).
func writeError(w http.ResponseWriter, status int, msg string) {
	writeProblem(w, status, msg, nil)
}

// writeStoreError maps a store error to its HTTP answer (statuses from the table in errors.go,
// the message from clientMessage: what the server's own condition's errors say is logged under
// the request id, never sent).
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, ok := statusOf(err)
	if !ok {
		if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && r.Context().Err() != nil {
			return // the client is gone
		}
		s.logWithheld(w, r, foldtype.CodeInternal, err)
		writeError(w, http.StatusInternalServerError, withheldMessages[foldtype.CodeInternal])
		return
	}
	h := w.Header()
	h.Set(HeaderErrorCode, string(code))
	msg, held := clientMessage(code, err)
	if held {
		s.logWithheld(w, r, code, err)
	}
	switch code {
	case foldtype.CodeStreamClosed:
		h.Set(wire.HeaderStreamClosed, "true")
		if tail, ok := stream.TailOf(err); ok {
			h.Set(wire.HeaderStreamNextOffset, FormatOffset(tail))
		}
	case foldtype.CodeStreamPaused:
		var fe *foldtype.Error
		if errors.As(err, &fe) {
			reason, _ := fe.Data["reason"].(string)
			setPaused(h, reason)
		}
	case foldtype.CodeOffsetConflict:
		if tail, ok := stream.TailOf(err); ok {
			h.Set(wire.HeaderStreamNextOffset, FormatOffset(tail))
		}
	case foldtype.CodeStaleEpoch:
		if epoch, ok := stream.EpochOf(err); ok {
			h.Set(wire.HeaderProducerEpoch, itoa(epoch))
		}
	case foldtype.CodeSequenceGap:
		if expected, received, ok := stream.SequenceGapOf(err); ok {
			h.Set(wire.HeaderProducerExpectedSeq, itoa(expected))
			h.Set(wire.HeaderProducerReceivedSeq, itoa(received))
		}
	}
	if status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	var fe *foldtype.Error
	errors.As(err, &fe)
	writeProblem(w, status, msg, problemMembers(fe, held))
}

// statusRecorder records the status and size of a response for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status = code
		r.wrote = true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status = http.StatusOK
		r.wrote = true
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (flushes for SSE).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush flushes the underlying writer.
func (r *statusRecorder) Flush() {
	if !r.wrote {
		r.status = http.StatusOK
		r.wrote = true
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}
