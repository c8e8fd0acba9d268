// Package node is the runtime a program embeds to run what `foldstream serve` runs: it opens the
// stream store from a path or URL (waiting for a database that is not up yet, answering 503 with
// Retry-After meanwhile), builds the host and lets the program register its processors, serves the
// Durable Streams protocol, the processor routes, the console, health and metrics over HTTP, runs
// the subscription delivery loop beside the host (package subscriptions), and on the end of its
// context shuts down in the one correct order within a grace: stop taking requests, stop the
// background work (the delivery loop among it), hand the processors over (checkpoints written,
// leases released), close the store.
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err := node.Run(ctx, node.Config{
//		DB: "foldstream.db", // or postgres://… shared by several nodes
//		Register: func(ctx context.Context, h *host.Host) error {
//			return host.RegisterPattern[State](ctx, h, "/counters/*", Counter{foldstream.NewBase(contract)})
//		},
//	})
//
// Config's zero value is valid; every field documents its default. `foldstream serve` is this
// package with its flags mapped onto Config (docs/server.md#embed-it).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/subscriptions"
)

// Defaults of Config.
const (
	// DefaultDB is the store a node opens when Config.DB is empty: a SQLite file in the working
	// directory.
	DefaultDB = "foldstream.db"
	// DefaultAddr is the address a node listens on when Config.Addr is empty: loopback only.
	DefaultAddr = "127.0.0.1:4437"
	// DefaultDBWait is how long a node waits for an unavailable database at start.
	DefaultDBWait = 5 * time.Minute
	// spanFlushTimeout bounds the export of the last spans at Shutdown.
	spanFlushTimeout = 5 * time.Second
	// DefaultShutdownGrace is how long a node takes at most to shut down.
	DefaultShutdownGrace = 15 * time.Second
	// DefaultCollectEvery is how often a node reclaims expired and deleted streams.
	DefaultCollectEvery = time.Minute
)

// Config configures a node. The zero value is valid: a SQLite file foldstream.db, served on
// 127.0.0.1:4437 with metrics at /metrics, no processors.
type Config struct {
	// DB is the stream store: a SQLite file (created if missing) or a postgres:// URL several
	// nodes share (docs/postgres.md). Defaults to DefaultDB ("foldstream.db").
	DB string
	// Store tunes the opening of DB (SQLite's synchronous mode, the PostgreSQL pool, the store's
	// clock; see storeopen.Config). Store.Store.Logger defaults to Logger.
	Store storeopen.Config
	// DBWait bounds the wait for a database that is unavailable at start (down, restarting,
	// starting up): meanwhile the node answers every request 503 UNAVAILABLE with Retry-After
	// (and /healthz 200), and retries with backoff. Past it, Start fails with ErrGaveUpWaiting.
	// Defaults to DefaultDBWait (5 minutes); negative: no wait, Start fails at once.
	DBWait time.Duration

	// Addr is the address to listen on; port 0 picks a free one (Node.Addr tells which).
	// Defaults to DefaultAddr ("127.0.0.1:4437").
	Addr string
	// MetricsAddr, when set, serves the Prometheus metrics on an address of their own (no token
	// asked there: keep it private) instead of at server.MetricsPath on Addr. Defaults to "".
	MetricsAddr string
	// DisableMetrics turns the metrics off. By default Server.Metrics is server.NewMetrics().
	DisableMetrics bool

	// TokensFile is a file of bearer tokens, one "<name> <read|read-write> <token>" per line
	// (server.ParseBearerTokens); when it or TokensEnv gives tokens, every request must present
	// one (docs/server.md#authorization). Defaults to "": none.
	TokensFile string
	// TokensEnv names an environment variable read for tokens too, in the same format
	// (`foldstream serve` reads FOLDSTREAM_TOKENS). Defaults to "": none read.
	TokensEnv string
	// AllowUnauthenticatedPublic lets the node listen on a non-loopback address without tokens
	// or Server.Authorize, for when a proxy in front authenticates. By default such a node is
	// refused (ErrUnauthenticatedPublic): anyone who reaches it could read, write and delete.
	AllowUnauthenticatedPublic bool

	// Register, when set, is called once with the node's host, before the node serves, to
	// register the program's processors (host.Register, host.RegisterPattern); an error stops
	// Start. The processor routes are served from the host. Defaults to nil: no host is built,
	// and the node serves streams only (what `foldstream serve` does).
	Register func(ctx context.Context, h *host.Host) error
	// Host configures the host Register gets (host.Config; its zero value is valid). Its
	// Logger defaults to Logger, TracerProvider to TracerProvider, NodeID to NodeID and
	// ProcessorPrefix to Server.ProcessorPrefix. Set Host.Addr to this node's URL as the
	// other nodes of a cluster reach it.
	Host host.Config
	// Server configures the HTTP server: authorization, origins, host names, limits, access log
	// (server.Config; its zero value is valid). Its Logger defaults to Logger, Metrics to
	// server.NewMetrics() (unless DisableMetrics), Processors to the host, TracerProvider to
	// TracerProvider, and Authorize to the tokens when there are any (setting both is refused).
	Server server.Config
	// Subscriptions configures the subscription delivery loop the node runs beside the host
	// (subscriptions.DeliveryConfig; its zero value is valid): the webhooks of the protocol's
	// subscriptions, their retries and the delivery lease. Its NodeID defaults to NodeID, Logger
	// to Logger, Prefix to Server.Prefix, and Server.AllowLoopbackWebhooks turns its
	// AllowLoopbackWebhooks on too.
	Subscriptions subscriptions.DeliveryConfig

	// TracerProvider, when set, traces every request and every ProcessEvent
	// (docs/server.md#tracing). Defaults to nil: no spans and no cost — unless the node is told
	// where to export spans (OTLPEndpoint, or OpenTelemetry's OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), when it makes a provider that exports them over
	// OTLP/HTTP in batches and flushes them at Shutdown.
	TracerProvider trace.TracerProvider
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector (http://collector:4318; spans go to
	// its /v1/traces) the node exports spans to when TracerProvider is nil. Defaults to empty:
	// the OTEL_EXPORTER_OTLP_* variables decide.
	OTLPEndpoint string
	// TraceSampleRatio is the share of new traces an exporting node records (0 to 1); a request
	// whose traceparent is sampled is always traced. Defaults to nil: every trace.
	TraceSampleRatio *float64
	// NodeID names this node in its leases (processors, subscription delivery); two live nodes
	// must never share one. Defaults to a random id.
	NodeID string
	// CollectEvery is how often expired and deleted streams are reclaimed from the database
	// (expiry is enforced on access regardless). Defaults to DefaultCollectEvery (1 minute);
	// negative never collects.
	CollectEvery time.Duration
	// ShutdownGrace bounds Shutdown, whatever the database does: requests in progress get up to
	// half of it (three quarters without a host), the host's hand-over up to three quarters, the
	// store's drain the rest. A phase not done in time is left: nothing acknowledged is lost
	// (acknowledged means committed) and leases not released expire. Defaults to
	// DefaultShutdownGrace (15 s).
	ShutdownGrace time.Duration
	// Logger receives the node's logs, and by default the store's, host's and server's.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// ErrUnauthenticatedPublic is (wrapped in an INVALID_CONFIG error) what Start refuses a
// non-loopback Addr without authentication with; see Config.AllowUnauthenticatedPublic.
var ErrUnauthenticatedPublic = errors.New("refusing to serve a non-loopback address without authentication")

// ErrGaveUpWaiting is (wrapped with the database's last error) what Start fails with when the
// database stayed unavailable for Config.DBWait.
var ErrGaveUpWaiting = errors.New("gave up waiting for the database")

// Node is a running node: store, host (when Config.Register is set) and HTTP server. Start
// returns one; Wait or Shutdown ends it. Its methods are safe for concurrent use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	st   *stream.Store
	host *host.Host
	srv  *server.Server
	subs *subscriptions.Delivery // the subscription delivery loop
	http *http.Server
	ln   net.Listener
	mln  net.Listener
	msrv *http.Server

	served   chan struct{} // closed when http.Serve returned
	serveErr error         // its error, set before served closes

	stopCollect context.CancelFunc
	collectDone chan struct{}

	flushSpans func(context.Context) error // the OTLP exporter's flush (nil: not exporting)

	shutOnce sync.Once
	shutDone chan struct{}
	shutErr  error
}

// Run starts a node (Start) and serves until ctx ends or serving fails, then shuts it down
// (Wait). Give it a ctx that SIGINT and SIGTERM end (signal.NotifyContext) and the node shuts
// down gracefully on them. It returns nil after a clean shutdown.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return n.Wait(ctx)
}

// Start checks cfg, listens, opens the store (waiting for the database per Config.DBWait), builds
// the host and calls Config.Register, then serves; it returns once the node serves. ctx bounds the
// start only (the wait and the registrations): end the node with Wait or Shutdown. Errors a user
// can cause are coded: INVALID_CONFIG for a configuration that cannot work, UNAVAILABLE for a
// database that stayed away.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, tokens, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	public := !LoopbackAddr(cfg.Addr)
	if public && cfg.Server.Authorize == nil {
		if !cfg.AllowUnauthenticatedPublic {
			return nil, &foldtype.Error{Code: foldtype.CodeInvalidConfig, Err: ErrUnauthenticatedPublic,
				Message: fmt.Sprintf("refusing to serve %s without authentication: anyone who can reach it could read, write and delete every stream. "+
					"Give bearer tokens (TokensFile, TokensEnv or Server.Authorize), listen on a loopback address, or set AllowUnauthenticatedPublic if a proxy in front authenticates", cfg.Addr)}
		}
		log.Warn("serving a non-loopback address without authentication: whoever reaches it may read, write and delete", "addr", cfg.Addr)
	}

	// Listen first, so that while the database is unavailable the node answers 503 with
	// Retry-After (and a load balancer sees it alive but not ready) instead of refusing.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, served: make(chan struct{}), collectDone: make(chan struct{}), shutDone: make(chan struct{})}
	if cfg.MetricsAddr != "" {
		if n.mln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("metrics address: %w", err)
		}
	}
	fail := func(err error) (*Node, error) {
		if n.ln != nil {
			n.ln.Close()
		}
		if n.mln != nil {
			n.mln.Close()
		}
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
		defer cancel()
		if n.srv != nil {
			_ = n.srv.Shutdown(sctx)
		}
		if n.host != nil {
			_ = n.host.Shutdown(sctx)
		}
		if n.st != nil {
			_ = n.st.Close(sctx)
		}
		if n.flushSpans != nil {
			_ = n.flushSpans(sctx)
		}
		return nil, err
	}
	if cfg.TracerProvider == nil {
		ratio := 1.0
		if cfg.TraceSampleRatio != nil {
			ratio = *cfg.TraceSampleRatio
		}
		tp, flush, err := otlpTracing(ctx, cfg.OTLPEndpoint, ratio, cfg.NodeID)
		if err != nil {
			return fail(err)
		}
		if tp != nil {
			n.flushSpans = flush
			cfg.TracerProvider = tp
			if cfg.Server.TracerProvider == nil {
				cfg.Server.TracerProvider = tp
			}
			if cfg.Host.TracerProvider == nil {
				cfg.Host.TracerProvider = tp
			}
			n.cfg = cfg
		}
	}
	n.st, n.ln, err = openWaiting(ctx, func() (*stream.Store, error) { return storeopen.Open(ctx, cfg.DB, cfg.Store) }, ln, cfg.DBWait, log)
	if err != nil {
		return fail(err)
	}
	if cfg.Register != nil {
		if n.host, err = host.New(n.st, cfg.Host); err != nil {
			return fail(err)
		}
		if err := cfg.Register(ctx, n.host); err != nil {
			return fail(fmt.Errorf("registering processors: %w", err))
		}
		cfg.Server.Processors = n.host
	}
	if n.srv, err = server.New(n.st, cfg.Server); err != nil {
		return fail(err)
	}
	n.subs = subscriptions.StartDelivery(n.st, cfg.Subscriptions)
	n.http = n.srv.HTTPServer() // header and idle timeouts; Shutdown ends long-polls and SSE promptly
	auth := "none"
	if tokens != nil {
		auth = fmt.Sprintf("%d bearer tokens", tokens.Len())
	} else if cfg.Server.Authorize != nil {
		auth = "custom"
	}
	log.Info("serving", "addr", n.ln.Addr().String(), "prefix", cfg.Server.Prefix, "db", n.st.Path(), "long_poll_timeout", cfg.Server.LongPollTimeout,
		"auth", auth, "processors", n.host != nil)
	lln := n.srv.LimitListener(n.ln)
	go func() {
		n.serveErr = n.http.Serve(lln)
		close(n.served)
	}()
	if n.mln != nil {
		n.msrv = &http.Server{Handler: metricsOnly(cfg.Server.Metrics.Handler()), ReadHeaderTimeout: server.DefaultHeaderReadTimeout}
		go func() { _ = n.msrv.Serve(n.mln) }()
	}
	cctx, stop := context.WithCancel(context.Background())
	n.stopCollect = stop
	go func() {
		defer close(n.collectDone)
		if cfg.CollectEvery > 0 {
			collectLoop(cctx, n.st, cfg.CollectEvery, log)
		}
	}()
	return n, nil
}

// withDefaults fills cfg's defaults and checks it, before anything listens or opens.
func (cfg Config) withDefaults() (Config, *server.BearerTokens, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.DBWait == 0 {
		cfg.DBWait = DefaultDBWait
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.CollectEvery == 0 {
		cfg.CollectEvery = DefaultCollectEvery
	}
	if cfg.Store.Store.Logger == nil {
		cfg.Store.Store.Logger = cfg.Logger
	}
	if cfg.Store.Postgres.IdleInTransactionTimeout == 0 {
		cfg.Store.Postgres.IdleInTransactionTimeout = idleInTransactionFor(cfg.Host.LeaseTTL)
	}
	s := &cfg.Server
	if s.Logger == nil {
		s.Logger = cfg.Logger
	}
	if s.Prefix == "" {
		s.Prefix = server.DefaultPrefix
	}
	if s.LongPollTimeout == 0 {
		s.LongPollTimeout = server.DefaultLongPollTimeout
	}
	if s.Metrics == nil && !cfg.DisableMetrics {
		s.Metrics = server.NewMetrics()
	}
	s.MetricsElsewhere = s.MetricsElsewhere || (cfg.MetricsAddr != "" && s.Metrics != nil)
	if s.TracerProvider == nil {
		s.TracerProvider = cfg.TracerProvider
	}
	d := &cfg.Subscriptions
	if d.NodeID == "" {
		d.NodeID = cfg.NodeID
	}
	if d.Logger == nil {
		d.Logger = cfg.Logger
	}
	if d.Prefix == "" {
		d.Prefix = s.Prefix
	}
	d.AllowLoopbackWebhooks = d.AllowLoopbackWebhooks || s.AllowLoopbackWebhooks
	h := &cfg.Host
	if h.Logger == nil {
		h.Logger = cfg.Logger
	}
	if h.TracerProvider == nil {
		h.TracerProvider = cfg.TracerProvider
	}
	if h.NodeID == "" {
		h.NodeID = cfg.NodeID
	}
	if h.ProcessorPrefix == "" {
		h.ProcessorPrefix = s.ProcessorPrefix
	}
	invalid := func(format string, args ...any) error {
		return foldtype.NewError(foldtype.CodeInvalidConfig, nil, format, args...)
	}
	if r := cfg.TraceSampleRatio; r != nil && (*r < 0 || *r > 1) {
		return cfg, nil, invalid("a trace sample ratio of %v: between 0 and 1", *r)
	}
	if cfg.MetricsAddr != "" && s.Metrics == nil {
		return cfg, nil, invalid("a metrics address with the metrics disabled: set one of MetricsAddr and DisableMetrics")
	}
	if cfg.Register != nil && s.Processors != nil {
		return cfg, nil, invalid("both Register and Server.Processors: the node serves the processors of its own host")
	}
	tokens, err := LoadTokens(cfg.TokensFile, cfg.TokensEnv)
	if err != nil {
		if foldtype.CodeOf(err) == "" {
			err = &foldtype.Error{Code: foldtype.CodeInvalidConfig, Message: err.Error(), Err: err}
		}
		return cfg, nil, err
	}
	if tokens != nil {
		if s.Authorize != nil {
			return cfg, nil, invalid("both bearer tokens and Server.Authorize: give one way to authorize")
		}
		s.Authorize = tokens.Authorize
	}
	if err := s.Check(); err != nil {
		return cfg, nil, &foldtype.Error{Code: foldtype.CodeInvalidConfig, Message: err.Error(), Err: err}
	}
	return cfg, tokens, nil
}

// Addr is the address the node serves on (the port chosen when Config.Addr asked for port 0).
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// MetricsAddr is the address the metrics are served on when Config.MetricsAddr is set, else nil.
func (n *Node) MetricsAddr() net.Addr {
	if n.mln == nil {
		return nil
	}
	return n.mln.Addr()
}

// Store is the node's stream store. It closes when the node shuts down.
func (n *Node) Store() *stream.Store { return n.st }

// Host is the node's host, or nil when Config.Register is nil.
func (n *Node) Host() *host.Host { return n.host }

// Wait serves until ctx ends or serving fails (its listener fails), then shuts the node down
// (Shutdown, within Config.ShutdownGrace) and returns what failed, or nil after a clean shutdown.
func (n *Node) Wait(ctx context.Context) error {
	var failed error
	select {
	case <-ctx.Done():
	case <-n.served:
		if !errors.Is(n.serveErr, http.ErrServerClosed) {
			failed = n.serveErr
		}
	}
	return errors.Join(failed, n.Shutdown(context.Background()))
}

// Shutdown shuts the node down within Config.ShutdownGrace (sooner if ctx ends first), in the
// one order that loses nothing and hands over at once: it stops taking requests (waiting reads
// end at once, requests in progress finish or are cut at their share of the grace), then the host
// hands its processors over (the event in progress checkpointed, leases released, so another node
// resumes them at once instead of after their expiry), then the store drains and closes. Between
// the first two steps the background work stops: the collection of expired streams, and the
// subscription delivery loop, which gives its lease up. A phase
// the database does not let finish in time is left, not failed: nothing acknowledged is lost, and
// a lease not released expires. Calling it again waits for the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() {
		defer close(n.shutDone)
		// The delivery loop gives its lease up by the hand-over's deadline at the latest.
		background := time.Now().Add(n.cfg.ShutdownGrace * 3 / 4)
		steps := shutdownSteps{
			stopHTTP:  n.stopHTTP,
			stopStore: n.st.Close,
			stopBackground: func() {
				n.stopCollect()
				<-n.collectDone
				dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), background)
				defer cancel()
				if err := n.subs.Shutdown(dctx); err != nil {
					n.log.Warn("shutting down: the subscription delivery loop did not stop in time; leaving it (its lease expires)", "err", err)
				}
			},
		}
		if n.host != nil {
			steps.handOver = n.host.Shutdown
		}
		n.shutErr = steps.run(ctx, n.cfg.ShutdownGrace, n.log)
		if n.flushSpans != nil {
			// The last spans, the shutdown's own included, go out after everything stopped.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spanFlushTimeout)
			if err := n.flushSpans(fctx); err != nil {
				n.log.Warn("exporting the last spans failed", "err", err)
			}
			cancel()
		}
	})
	<-n.shutDone
	return n.shutErr
}

// stopHTTP stops taking requests: graceful until ctx ends, then the connections still open are
// closed.
func (n *Node) stopHTTP(ctx context.Context) error {
	if n.msrv != nil {
		defer n.msrv.Close()
	}
	err := n.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		n.log.Warn("shutting down: requests still in progress at their share of the grace; closing their connections")
		err = n.http.Close()
	}
	<-n.served
	if n.serveErr != nil && !errors.Is(n.serveErr, http.ErrServerClosed) {
		err = errors.Join(err, n.serveErr)
	}
	return err
}

// shutdownSteps are the phases of a node's shutdown, as functions so that their order and
// deadlines can be tested with fakes.
type shutdownSteps struct {
	stopHTTP       func(ctx context.Context) error // stop taking requests; cut the rest when ctx ends
	handOver       func(ctx context.Context) error // the host's Shutdown; nil without a host
	stopBackground func()                          // periodic work on the store (collection)
	stopStore      func(ctx context.Context) error // the store's drain and close
}

// run runs the steps in order within grace (or until ctx ends). Each phase has a deadline of its
// own (HTTP: half the grace with a host, three quarters without; the hand-over: three quarters;
// the store: all of it), so a phase that is stuck leaves the next ones their share.
func (s shutdownSteps) run(ctx context.Context, grace time.Duration, log *slog.Logger) error {
	start := time.Now()
	log.Info("shutting down", "grace", grace)
	httpShare := grace * 3 / 4
	if s.handOver != nil {
		httpShare = grace / 2
	}
	phase := func(share time.Duration) (context.Context, context.CancelFunc) {
		return context.WithDeadline(ctx, start.Add(share))
	}

	hctx, cancel := phase(httpShare)
	err := s.stopHTTP(hctx)
	cancel()
	if s.stopBackground != nil {
		s.stopBackground()
	}
	if s.handOver != nil {
		octx, cancel := phase(grace * 3 / 4)
		herr := s.handOver(octx)
		if herr != nil && octx.Err() != nil {
			log.Warn("shutting down: the host's hand-over did not finish within its share of the grace; leaving it (leases not released expire)", "err", herr)
			herr = nil
		}
		cancel()
		err = errors.Join(err, herr)
	}
	sctx, cancel := phase(grace)
	defer cancel()
	cerr := s.stopStore(sctx)
	if cerr != nil && sctx.Err() != nil {
		// Not an error of the process: the database did not let the drain finish in time.
		log.Warn("shutting down: the store's drain did not finish within the grace; leaving it (nothing acknowledged is lost, leases expire)", "err", cerr)
		cerr = nil
	}
	log.Info("shut down", "took", time.Since(start).Round(time.Millisecond))
	return errors.Join(err, cerr)
}

// metricsOnly serves h at server.MetricsPath (GET or HEAD) and answers every other path 404.
func metricsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != server.MetricsPath {
			w.Header().Set(server.HeaderErrorCode, string(foldtype.CodeNoRoute))
			http.Error(w, "this address serves "+server.MetricsPath+" only", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// collectLoop reclaims expired and deleted streams every interval until ctx ends. Expiry is
// enforced on access regardless; this only frees space.
func collectLoop(ctx context.Context, st *stream.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := st.Protocol().CollectExpired(ctx)
			if err != nil && ctx.Err() == nil {
				log.Warn("collect expired streams", "err", err)
			} else if n > 0 {
				log.Debug("collected expired streams", "streams", n)
			}
		}
	}
}

// LoadTokens reads bearer tokens from file (when not "") and from the environment variable env
// (when not "" and set), in server.ParseBearerTokens' format; nil when neither gives any. A name
// or token given in both is refused. Errors name the file or the variable and the line at fault.
func LoadTokens(file, env string) (*server.BearerTokens, error) {
	var parts []string
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("tokens file: %w", err)
		}
		if _, err := server.ParseBearerTokens(string(b)); err != nil {
			return nil, fmt.Errorf("tokens file %s: %w", file, err)
		}
		parts = append(parts, string(b))
	}
	if env != "" {
		if v := os.Getenv(env); strings.TrimSpace(v) != "" {
			if _, err := server.ParseBearerTokens(v); err != nil {
				return nil, fmt.Errorf("$%s: %w", env, err)
			}
			parts = append(parts, v)
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	return server.ParseBearerTokens(strings.Join(parts, "\n")) // also refuses a name or token given in both
}

// LoopbackAddr reports whether a listen address only accepts connections from this machine
// (localhost, 127.0.0.0/8, ::1). An address without a host (":4437") listens on every interface.
func LoopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// idleInTransactionFor is the PostgreSQL idle-in-transaction timeout of a node whose processor
// leases last leaseTTL (0: host.DefaultLeaseTTL): at most the lease. A node frozen in the middle of
// a write holds its streams' locks; the node that takes its leases over must be able to write to
// those streams (its effects' events, its checkpoints) once the lease ran out, not only when the
// frozen node wakes (docs/postgres.md#operations-pool-timeouts-outages).
func idleInTransactionFor(leaseTTL time.Duration) time.Duration {
	if leaseTTL <= 0 {
		leaseTTL = host.DefaultLeaseTTL
	}
	return min(leaseTTL, pgdriver.DefaultIdleInTransactionTimeout)
}
