package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream"
)

func init() {
	commands["serve"] = command{summary: "run the Durable Streams HTTP server over a SQLite store", run: runServe}
}

// runServe runs the server until ctx ends, then shuts down gracefully.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:4437", "address to listen on")
	db := fs.String("db", "foldstream.db", "SQLite file of the stream store (created if missing)")
	longPoll := fs.Duration("long-poll-timeout", server.DefaultLongPollTimeout, "how long a long-poll waits for data; also the SSE keep-alive interval")
	sseMax := fs.Duration("sse-max-duration", server.DefaultSSEMaxDuration, "how long one SSE connection lives before the client is made to reconnect")
	prefix := fs.String("prefix", server.DefaultPrefix, "URL path streams are served under")
	maxBody := fs.Int64("max-body-bytes", server.DefaultMaxBodyBytes, "largest accepted request body (413 beyond)")
	sync := fs.String("sync", "FULL", "SQLite synchronous mode: FULL (durable against power loss) or NORMAL (against process crashes only)")
	collect := fs.Duration("collect-every", time.Minute, "how often expired and deleted streams are reclaimed from the file (0 disables)")
	level := fs.String("log-level", "info", "log level: debug (one line per request), info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("bad --log-level %q: use debug, info, warn or error", *level)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	st, err := stream.Open(*db, stream.Options{Synchronous: stream.Synchronous(strings.ToUpper(*sync)), Logger: log})
	if err != nil {
		return err
	}
	h := server.New(st, server.Config{
		Prefix:          *prefix,
		LongPollTimeout: *longPoll,
		SSEMaxDuration:  *sseMax,
		MaxBodyBytes:    *maxBody,
		Logger:          log,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		st.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(h.Shutdown) // end long-polls and SSE connections promptly
	log.Info("serving", "addr", ln.Addr().String(), "prefix", *prefix, "db", *db, "long_poll_timeout", *longPoll)
	fmt.Fprintf(stdout, "foldstream: serving http://%s%s\n", ln.Addr(), *prefix)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	collectDone := make(chan struct{})
	collectCtx, stopCollect := context.WithCancel(ctx)
	defer stopCollect()
	go func() {
		defer close(collectDone)
		if *collect > 0 {
			collectLoop(collectCtx, st, *collect, log)
		}
	}()
	select {
	case err := <-errc:
		stopCollect()
		<-collectDone
		st.Close()
		return err
	case <-ctx.Done():
	}
	<-collectDone
	log.Info("shutting down")
	// Waiting reads end at once (Shutdown above); give the rest a few seconds.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	if errors.Is(shutErr, context.DeadlineExceeded) {
		shutErr = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		shutErr = errors.Join(shutErr, err)
	}
	return errors.Join(shutErr, st.Close())
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
			n, err := st.CollectExpired(ctx)
			if err != nil && ctx.Err() == nil {
				log.Warn("collect expired streams", "err", err)
			} else if n > 0 {
				log.Debug("collected expired streams", "streams", n)
			}
		}
	}
}
