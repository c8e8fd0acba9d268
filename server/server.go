// Package server is foldstream's Durable Streams HTTP server: an http.Handler that serves the
// protocol (create, append, close, delete, metadata, catch-up, long-poll and SSE reads, forks,
// TTLs, idempotent producers) over a [stream.Store].
//
// Construction is one call, so tests and benchmarks can run it in-process:
//
//	st, _ := stream.Open("foldstream.db", stream.Options{})
//	h := server.New(st, server.Config{LongPollTimeout: 500 * time.Millisecond})
//	http.ListenAndServe("127.0.0.1:4437", h)
//
// Streams live under Config.Prefix (default "/v1/stream/"): the URL path /v1/stream/orders/42 is
// the store path "/orders/42" — the path a processor registers on with package host. See
// docs/server.md for routes and examples.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/stream"
)

// Defaults of Config.
const (
	// DefaultPrefix is where streams are served.
	DefaultPrefix = "/v1/stream/"
	// DefaultProcessorPrefix is where processors are served (when Config.Processors is set).
	DefaultProcessorPrefix = "/v1/processor/"
	// DefaultLongPollTimeout is how long a long-poll waits for data, and the SSE keep-alive
	// interval. 20 s stays below common proxy idle timeouts (30–60 s); the conformance suite
	// runs with 500 ms.
	DefaultLongPollTimeout = 20 * time.Second
	// DefaultSSEMaxDuration is how long an SSE connection lives before the server closes it so
	// the client reconnects from its last offset (helps CDN request collapsing, spec §12.3).
	DefaultSSEMaxDuration = 60 * time.Second
	// DefaultMaxBodyBytes caps a request body; larger bodies get 413.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultReadChunkBytes caps the data of one read response; clients follow
	// Stream-Next-Offset for the rest.
	DefaultReadChunkBytes = 1 << 20
)

// Config configures a Server. The zero value is valid: every field documents its default.
type Config struct {
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
	// ReadChunkBytes caps one read response. Defaults to DefaultReadChunkBytes (1 MiB).
	ReadChunkBytes int
	// Clock is the time source of the cursor rule (spec §16.3). Defaults to the store's clock.
	Clock foldstream.Clock
	// Logger receives one debug line per request and errors. Defaults to slog.Default().
	Logger *slog.Logger
	// Processors, when set, serves processor snapshots, live-state seeds and live-state deltas
	// under ProcessorPrefix (see processors.go). A *host.Host is one.
	Processors Processors
	// ProcessorPrefix is where processors are served. Defaults to DefaultProcessorPrefix
	// ("/v1/processor/").
	ProcessorPrefix string
}

// Server is the Durable Streams HTTP handler. Create it with New.
type Server struct {
	st  *stream.Store
	cfg Config
	log *slog.Logger

	stopOnce sync.Once
	stopping chan struct{} // closed by Shutdown
}

var _ http.Handler = (*Server)(nil)

// New returns a Server serving st with cfg.
func New(st *stream.Store, cfg Config) *Server {
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
	if cfg.Clock == nil {
		cfg.Clock = st.Clock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{st: st, cfg: cfg, log: cfg.Logger, stopping: make(chan struct{})}
}

// Shutdown makes waiting reads end promptly: long-polls answer their timeout response and SSE
// connections close (clients resume from their last offset). Other requests are still served.
// Register it with http.Server.RegisterOnShutdown so a graceful shutdown does not wait for them.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("request panicked", "method", r.Method, "path", r.URL.Path, "panic", p)
			if !rec.wrote {
				http.Error(rec, "internal error", http.StatusInternalServerError)
			}
		}
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
				"status", rec.status, "bytes", rec.bytes, "duration", time.Since(start))
		}
	}()
	setCommonHeaders(rec.Header())
	s.route(rec, r)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p := r.URL.Path
	switch {
	case s.cfg.Processors != nil && strings.HasPrefix(p, s.cfg.ProcessorPrefix):
		s.serveProcessor(w, r, strings.TrimPrefix(p, s.cfg.ProcessorPrefix))
		return
	case strings.HasPrefix(p, s.cfg.Prefix):
	default:
		writeError(w, http.StatusNotFound, "no route for this path; streams are under "+s.cfg.Prefix)
		return
	}
	name := strings.TrimPrefix(p, s.cfg.Prefix)
	// Reserved subscription APIs are routed before streams so they can never be created as
	// streams (spec §3.3); foldstream does not implement them yet.
	if name == "__ds" || strings.HasPrefix(name, "__ds/") {
		writeError(w, http.StatusNotFound, "reserved path: subscription APIs are not supported by this server")
		return
	}
	if name == "" {
		writeError(w, http.StatusNotFound, "name a stream after "+s.cfg.Prefix)
		return
	}
	// The store path is the URL path below the prefix with a leading slash: /v1/stream/orders
	// is the store path "/orders", the path processors register on.
	name = "/" + name
	switch r.Method {
	case http.MethodPut:
		s.handleCreate(w, r, name)
	case http.MethodPost:
		s.handleAppend(w, r, name)
	case http.MethodGet:
		s.handleRead(w, r, name)
	case http.MethodHead:
		s.handleHead(w, r, name)
	case http.MethodDelete:
		s.handleDelete(w, r, name)
	default:
		w.Header().Set("Allow", allowedMethods)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

const allowedMethods = "GET, POST, PUT, DELETE, HEAD, OPTIONS"

// setCommonHeaders sets the CORS and security headers every response carries (spec §17).
func setCommonHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "cross-origin")
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", allowedMethods)
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, Stream-Seq, Stream-TTL, Stream-Expires-At, "+
		"Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, "+
		"Stream-Fork-Sub-Offset, If-None-Match, "+HeaderExpectedOffset)
	h.Set("Access-Control-Expose-Headers", "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, "+
		"Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, ETag, Content-Type, "+
		"Content-Encoding, Vary, Location, Stream-TTL, Stream-Expires-At, stream-sse-data-encoding, "+HeaderErrorCode)
}

// writeError answers a plain-text error. Clients must not parse the body.
func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

// writeStoreError maps a store error to its HTTP answer (statuses from the table in errors.go).
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, ok := statusOf(err)
	if !ok {
		if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && r.Context().Err() != nil {
			return // the client is gone
		}
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	h := w.Header()
	h.Set(HeaderErrorCode, string(code))
	msg := err.Error()
	switch code {
	case foldstream.CodeStreamClosed:
		h.Set("Stream-Closed", "true")
		if tail, ok := stream.TailOf(err); ok {
			h.Set("Stream-Next-Offset", FormatOffset(tail))
		}
	case foldstream.CodeOffsetConflict:
		if tail, ok := stream.TailOf(err); ok {
			h.Set("Stream-Next-Offset", FormatOffset(tail))
		}
	case foldstream.CodeStaleEpoch:
		if epoch, ok := stream.EpochOf(err); ok {
			h.Set("Producer-Epoch", itoa(epoch))
		}
	case foldstream.CodeSequenceGap:
		if expected, received, ok := stream.SequenceGapOf(err); ok {
			h.Set("Producer-Expected-Seq", itoa(expected))
			h.Set("Producer-Received-Seq", itoa(received))
		}
	case foldstream.CodeClosed:
		msg = "server is shutting down"
	}
	if status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	writeError(w, status, msg)
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
