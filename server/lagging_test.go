package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// stuckProcessors is a processor host whose answers the test chooses: a fixed error, or a wait
// that lasts until the request's context ends (a processor far behind).
type stuckProcessors struct {
	err     error
	reduced int64
}

func (p stuckProcessors) Snapshot(ctx context.Context, _, _ string) (foldtype.Snapshot[json.RawMessage], error) {
	if p.err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, p.err
	}
	<-ctx.Done()
	return foldtype.Snapshot[json.RawMessage]{}, ctx.Err()
}

func (p stuckProcessors) LiveSnapshot(ctx context.Context, _, _ string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	if p.err != nil {
		return foldtype.LiveSnapshot[json.RawMessage]{}, p.err
	}
	<-ctx.Done()
	return foldtype.LiveSnapshot[json.RawMessage]{}, ctx.Err()
}

func (p stuckProcessors) WaitUntilProcessed(ctx context.Context, _, _ string, _ int64, _ time.Duration) error {
	return p.err
}

func (p stuckProcessors) ReducedThroughOffset(_, _ string) (int64, error) { return p.reduced, nil }

func serveStuck(t *testing.T, p stuckProcessors) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/stuck.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: p, Logger: quiet, ProcessorWaitTimeout: 200 * time.Millisecond}))
	t.Cleanup(func() {
		ts.Close()
		st.Close(context.Background())
	})
	return ts.URL
}

// TestLaggingProcessorRoutesAreBounded: a snapshot whose processor does not catch up answers 504
// PROCESS_TIMEOUT with the processor's offset after ProcessorWaitTimeout instead of waiting with
// no bound; a host reporting CATCHING_UP answers 503 with Retry-After and the offset; a parked
// processor answers 503 PROCESSOR_PARKED with its cause.
func TestLaggingProcessorRoutesAreBounded(t *testing.T) {
	url := serveStuck(t, stuckProcessors{reduced: 7})
	for _, view := range []string{"", "?view=live", "?live=sse"} {
		start := time.Now()
		res, body := request(t, "GET", url+"/v1/processor/p/orders"+view, "")
		wantCoded(t, "stuck snapshot "+view, res, body, http.StatusGatewayTimeout, foldtype.CodeProcessTimeout)
		if got := res.Header.Get(server.HeaderProcessorOffset); got != server.FormatOffset(7) {
			t.Fatalf("504 reports offset %q, want %s", got, server.FormatOffset(7))
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the bound of 200ms took %v", time.Since(start))
		}
	}

	catching := foldtype.NewError(foldtype.CodeCatchingUp, map[string]any{"offset": int64(3)}, "processor p is catching up (at offset 3 of 60000)")
	url = serveStuck(t, stuckProcessors{err: catching})
	res, body := request(t, "GET", url+"/v1/processor/p/orders?waitUntilProcessed=9", "")
	// A wait that ends before the processor got there has one answer: 504 with its offset.
	wantCoded(t, "catching up, waiting", res, body, http.StatusGatewayTimeout, foldtype.CodeProcessTimeout)
	if res.Header.Get(server.HeaderProcessorOffset) != server.FormatOffset(3) {
		t.Fatalf("catching up, waiting: headers %v", res.Header)
	}
	res, body = request(t, "GET", url+"/v1/processor/p/orders", "")
	wantCoded(t, "catching up", res, body, http.StatusServiceUnavailable, foldtype.CodeCatchingUp)
	if res.Header.Get("Retry-After") == "" || res.Header.Get(server.HeaderProcessorOffset) != server.FormatOffset(3) {
		t.Fatalf("catching up: headers %v", res.Header)
	}

	parked := foldtype.NewError(foldtype.CodeProcessorParked, nil, "processor p is parked: its event at offset 12 conflicts with idempotency key p/x@11")
	url = serveStuck(t, stuckProcessors{err: parked})
	res, body = request(t, "GET", url+"/v1/processor/p/orders", "")
	wantCoded(t, "parked", res, body, http.StatusServiceUnavailable, foldtype.CodeProcessorParked)
	if !strings.Contains(body, "conflicts with idempotency key") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("parked: %q %v", body, res.Header)
	}
}
