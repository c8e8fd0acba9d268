package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/node"
	"github.com/foldstream/foldstream/server"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A node on a non-loopback address without authentication is refused with a coded error before
// anything listens or opens: no database file appears.
func TestStartRefusesAPublicAddressWithoutAuthenticationBeforeOpeningTheStore(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "public.db")
	_, err := node.Start(t.Context(), node.Config{DB: db, Addr: "0.0.0.0:0", Logger: quiet})
	if !errors.Is(err, node.ErrUnauthenticatedPublic) || foldtype.CodeOf(err) != foldtype.CodeInvalidConfig {
		t.Fatalf("Start on 0.0.0.0 without tokens: %v (code %s); want ErrUnauthenticatedPublic, INVALID_CONFIG", err, foldtype.CodeOf(err))
	}
	if _, statErr := os.Stat(db); !os.IsNotExist(statErr) {
		t.Fatalf("the refused node created its database: %v", statErr)
	}
}

// Settings that cannot work together are refused with INVALID_CONFIG before anything starts.
func TestStartRefusesConflictingSettings(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("w read-write writer-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	allowAll := func(*http.Request, server.Operation, string) (*foldtype.Principal, error) { return nil, nil }
	for name, cfg := range map[string]node.Config{
		"metrics address with metrics off": {MetricsAddr: "127.0.0.1:0", DisableMetrics: true},
		"register and server processors":   {Register: func(context.Context, *host.Host) error { return nil }, Server: server.Config{Processors: new(host.Host)}},
		"tokens and an authorizer":         {TokensFile: file, Server: server.Config{Authorize: allowAll}},
		"a bad public URL":                 {Server: server.Config{PublicBaseURL: "ftp://x"}},
	} {
		cfg.DB, cfg.Logger = filepath.Join(t.TempDir(), "x.db"), quiet
		if _, err := node.Start(t.Context(), cfg); foldtype.CodeOf(err) != foldtype.CodeInvalidConfig {
			t.Errorf("%s: %v; want INVALID_CONFIG", name, err)
		}
	}
}

// A node serves its host's processors and, once shut down, has handed them over and closed its
// store: the store refuses work (CLOSED) and the SQLite lock file is gone.
func TestANodeServesItsProcessorsAndShutdownClosesTheStoreLast(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "node.db")
	n, err := node.Start(t.Context(), node.Config{DB: db, Addr: "127.0.0.1:0", Logger: quiet,
		Register: func(ctx context.Context, h *host.Host) error {
			return host.RegisterPattern[State](ctx, h, "/counters/*", Counter{foldstream.NewBase(contract)})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.Addr().String()
	if _, err := n.Store().Events().Stream("/counters/a").Append(t.Context(), foldstream.EventInput{Type: "ticked", Payload: foldstream.JSON(Ticked{By: 4})}); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(base + "/v1/processor/counter/counters/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ticks":4`) {
		t.Fatalf("processor route: %d %s; want 200 with 4 ticks", res.StatusCode, body)
	}
	res, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d; want the metrics on by default", res.StatusCode)
	}
	// The node's host feeds the processor and lease metrics (docs/server.md#metrics).
	for _, line := range []string{`foldstream_processor_processed_events_total{slug="counter"} 1`,
		`foldstream_processor_lag_events{slug="counter"} 0`, `foldstream_leases_held 1`} {
		if !strings.Contains(string(metrics), "\n"+line+"\n") {
			t.Errorf("/metrics has no %q", line)
		}
	}
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatalf("a second shutdown: %v", err)
	}
	if _, err := n.Store().Events().Stream("/counters/a").Append(context.Background(), foldstream.EventInput{Type: "ticked", Payload: foldstream.JSON(Ticked{By: 1})}); foldtype.CodeOf(err) != foldtype.CodeClosed {
		t.Fatalf("append after shutdown: %v; want CLOSED", err)
	}
	if _, err := n.Host().Snapshot(context.Background(), "/counters/a", "counter"); !errors.Is(err, host.ErrShutdown) {
		t.Fatalf("host read after shutdown: %v; want ErrShutdown", err)
	}
	if _, err := os.Stat(db + "-lock"); !os.IsNotExist(err) {
		t.Fatalf("after a clean shutdown the store's lock file remains: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the node still takes requests after shutdown")
	}
}
