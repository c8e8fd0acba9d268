package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// The bearer tokens of the processor verbs' CLI tests: an application's read-write token and an
// operator's (dave's) ops token.
const writer, ops = "writer-token-0123456789abcdef", "opsman-token-0123456789abcdef"

// opsServer starts what a `foldstream processors …` verb talks to in the CLI tests: a store in a
// file of the test's own (clk its clock; nil: the real one), a host with cfg (its Logger quiet),
// and an HTTP server of the store with the host's processor routes and the tokens writer and ops.
// cli runs `foldstream processors ARGS…` and returns its exit code, stdout and stderr. All of it
// closes when the test ends (the server first, the store last).
func opsServer(t *testing.T, ctx context.Context, clk foldtype.Clock, cfg host.Config) (
	st *stream.Store, h *host.Host, ts *httptest.Server, cli func(args ...string) (int, string, string)) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(ctx, filepath.Join(t.TempDir(), "ops.db"), storeopen.Config{Store: stream.Config{Logger: quiet, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	cfg.Logger = quiet
	if h, err = host.New(st, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	bt, err := server.ParseBearerTokens("app read-write " + writer + "\ndave ops " + ops + "\n")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(st, server.Config{Processors: h, Logger: quiet, Authorize: bt.Authorize})
	if err != nil {
		t.Fatal(err)
	}
	ts = httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	cli = func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"processors"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	return st, h, ts, cli
}
