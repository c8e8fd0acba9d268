package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/foldstream/foldstream/internal/heapfloor"
	"github.com/foldstream/foldstream/node"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
	"github.com/foldstream/foldstream/subscriptions"
)

func init() {
	commands["serve"] = command{summary: "run the Durable Streams HTTP server over a SQLite file or a PostgreSQL database", run: runServe}
}

// tokensEnv is the environment variable serve reads bearer tokens from (the same format as
// --tokens-file).
const tokensEnv = "FOLDSTREAM_TOKENS"

// runServe runs the server until ctx ends, then shuts down gracefully.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	addr := fs.String("addr", "127.0.0.1:4437", "address to listen on")
	db := fs.String("db", "foldstream.db", "SQLite file of the stream store (created if missing), or a postgres:// URL: nodes given the same URL share one database (docs/postgres.md)")
	longPoll := fs.Duration("long-poll-timeout", server.DefaultLongPollTimeout, "how long a long-poll waits for data; also the SSE keep-alive interval")
	sseMax := fs.Duration("sse-max-duration", server.DefaultSSEMaxDuration, "how long one SSE connection lives before the client is made to reconnect")
	prefix := fs.String("prefix", server.DefaultPrefix, "URL path streams are served under")
	maxBody := fs.Int64("max-body-bytes", server.DefaultMaxBodyBytes, "largest accepted request body (413 beyond)")
	sync := fs.String("sync", "FULL", "SQLite synchronous mode: FULL (durable against power loss) or NORMAL (against process crashes only)")
	collect := fs.Duration("collect-every", time.Minute, "how often expired and deleted streams are reclaimed from the file (0 disables)")
	level := fs.String("log-level", "info", "log level: debug (one line per request), info, warn or error")
	accessLog := fs.Bool("access-log", false, "log one line per request (method, path, status, bytes, duration, request id) at info level, without turning on the rest of debug")
	logFormat := fs.String("log-format", "text", "log format: text (key=value lines) or json (one JSON object per line, for a log pipeline)")
	tokensFile := fs.String("tokens-file", "", "file of bearer tokens, one \"<name> <read|read-write|ops> <token>\" per line; requests must then authenticate (also read from $"+tokensEnv+")")
	allowUnauth := fs.Bool("allow-unauthenticated-public", false, "serve a non-loopback address without tokens: anyone who can reach it may read, write and delete")
	origins := fs.String("allowed-origins", "", "comma-separated browser origins whose pages may write (https://app.example.com, or *); any origin may read")
	restrictReads := fs.Bool("restrict-read-origins", false, "let only --allowed-origins (and the server's own origin) read from browsers too")
	hosts := fs.String("allowed-hosts", "", "comma-separated host names served (streams.example.com, *.example.com, or *); default: only loopback names on a loopback address")
	publicURL := fs.String("public-url", "", "public base URL (https://streams.example.com) used in Location headers and as the server's own origin")
	writeTimeout := fs.Duration("write-timeout", server.DefaultWriteTimeout, "each write of a long-poll or SSE answer must finish within this; slower readers are cut")
	bodyTimeout := fs.Duration("body-read-timeout", server.DefaultBodyReadTimeout, "a request body must arrive within this (408 after)")
	maxLive := fs.Int("max-live-readers", server.DefaultMaxLiveReaders, "concurrent long-poll and SSE readers (503 beyond)")
	maxInFlight := fs.Int64("max-body-bytes-in-flight", server.DefaultMaxBodyBytesInFlight, "request-body bytes held by all requests at once (503 beyond)")
	maxConns := fs.Int("max-connections", server.DefaultMaxConnections, "open connections (503 beyond)")
	metricsAddr := fs.String("metrics-addr", "", "serve the Prometheus metrics on this address of their own (no token asked there; keep it private), instead of at /metrics (a read like any route)")
	loopHooks := fs.Bool("allow-loopback-webhooks", false, "let webhook subscriptions target loopback addresses (localhost, 127.0.0.0/8, ::1), over http too: development and tests only")
	webhookTimeout := fs.Duration("webhook-timeout", subscriptions.DefaultWebhookTimeout, "one webhook delivery attempt must finish within this")
	nodeID := fs.String("node-id", "", "this node's name as holder of the subscription-delivery lease (default: random)")
	heapFloor := fs.Int("gc-heap-floor-mib", heapfloor.DefaultFloor>>20, "the garbage collector lets the heap grow to this many MiB before a cycle while the live heap is smaller (GOGC applies above it; 0: GOGC alone, as Go does)")
	grace := fs.Duration("shutdown-grace", DefaultShutdownGrace, "SIGINT or SIGTERM end the process within this, whatever the database does: requests in progress get most of it, the store's drain the rest (nothing acknowledged is lost; leases not released in time expire)")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export OpenTelemetry spans over OTLP/HTTP to this base URL (http://collector:4318); also turned on by $"+node.EnvOTLPEndpoint+" or $"+node.EnvOTLPTracesEndpoint+" (and their OTEL_EXPORTER_OTLP_* companions); off by default")
	sampleRatio := fs.Float64("trace-sample-ratio", 1, "share of new traces recorded when spans are exported (0 to 1); a request with a sampled traceparent is always traced")
	dbWait := fs.Duration("db-wait", DefaultDBWait, "how long to wait for an unavailable database (down, restarting, starting up) at start, answering 503 with Retry-After meanwhile; 0 exits at once")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream serve [flags]\n\nRuns the Durable Streams HTTP server over a stream store until interrupted: a SQLite file,\n"+
			"or a PostgreSQL database (--db postgres://...).\n"+
			"Bearer tokens come from --tokens-file or $"+tokensEnv+", never from a flag value (it would show in ps).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *sampleRatio < 0 || *sampleRatio > 1 {
		return fmt.Errorf("bad --trace-sample-ratio %v: between 0 and 1", *sampleRatio)
	}
	if *heapFloor < 0 {
		return fmt.Errorf("bad --gc-heap-floor-mib %d: 0 or more", *heapFloor)
	}
	defer heapfloor.Start(uint64(*heapFloor) << 20)()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("bad --log-level %q: use debug, info, warn or error", *level)
	}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	default:
		return fmt.Errorf("bad --log-format %q: use text or json", *logFormat)
	}

	cfg := node.Config{
		OTLPEndpoint:               *otlpEndpoint,
		TraceSampleRatio:           sampleRatio,
		DB:                         *db,
		Store:                      storeopen.Config{SQLite: sqlitedriver.Config{Synchronous: *sync}},
		DBWait:                     orNever(*dbWait),
		Addr:                       *addr,
		MetricsAddr:                *metricsAddr,
		TokensFile:                 *tokensFile,
		TokensEnv:                  tokensEnv,
		AllowUnauthenticatedPublic: *allowUnauth,
		NodeID:                     *nodeID,
		CollectEvery:               orNever(*collect),
		ShutdownGrace:              *grace,
		Logger:                     log,
		Server: server.Config{
			AccessLog:             *accessLog,
			Prefix:                *prefix,
			LongPollTimeout:       *longPoll,
			SSEMaxDuration:        *sseMax,
			MaxBodyBytes:          *maxBody,
			AllowedOrigins:        splitList(*origins),
			RestrictReadOrigins:   *restrictReads,
			AllowedHosts:          splitList(*hosts),
			PublicBaseURL:         *publicURL,
			WriteTimeout:          *writeTimeout,
			BodyReadTimeout:       *bodyTimeout,
			MaxLiveReaders:        *maxLive,
			MaxBodyBytesInFlight:  *maxInFlight,
			MaxConnections:        *maxConns,
			AllowLoopbackWebhooks: *loopHooks,
		},
		Subscriptions: subscriptions.DeliveryConfig{WebhookTimeout: *webhookTimeout},
	}
	n, err := node.Start(ctx, cfg)
	switch {
	case errors.Is(err, node.ErrUnauthenticatedPublic):
		return fmt.Errorf("refusing to serve %s without authentication: anyone who can reach it could read, write and delete every stream. "+
			"Give tokens (--tokens-file or $%s), listen on 127.0.0.1, or pass --allow-unauthenticated-public if a proxy in front authenticates", *addr, tokensEnv)
	case errors.Is(err, node.ErrGaveUpWaiting):
		return fmt.Errorf("--db-wait %s ran out: %w", *dbWait, err)
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "foldstream: serving http://%s%s\n", n.Addr(), *prefix)
	if a := n.MetricsAddr(); a != nil {
		fmt.Fprintf(stdout, "foldstream: metrics at http://%s%s\n", a, server.MetricsPath)
	}
	return n.Wait(ctx)
}

// DefaultShutdownGrace is how long serve takes at most to end after SIGINT or SIGTERM.
const DefaultShutdownGrace = node.DefaultShutdownGrace

// DefaultDBWait is how long serve waits for an unavailable database before giving up.
const DefaultDBWait = node.DefaultDBWait

// orNever maps a flag's 0 ("not at all") onto node.Config's negative (its 0 is the default).
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// loadTokens reads bearer tokens from file (when given) and from $FOLDSTREAM_TOKENS (when set);
// nil when neither gives any.
func loadTokens(file string) (*server.BearerTokens, error) { return node.LoadTokens(file, tokensEnv) }

// loopbackAddr reports whether a listen address only accepts connections from this machine.
func loopbackAddr(addr string) bool { return node.LoopbackAddr(addr) }

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
