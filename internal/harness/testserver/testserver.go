// Package testserver runs foldstream's own Durable Streams server in process (httptest on
// 127.0.0.1, long-poll 500 ms, streams under /v1/stream/) for the client's integration tests and
// benchmarks.
package testserver

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/subscriptions"
)

// Start serves an in-memory store for the test's lifetime and returns the base URL
// ("http://127.0.0.1:PORT").
func Start(tb testing.TB) string {
	tb.Helper()
	u, stop, err := Serve(":memory:")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return u
}

// Serve serves the store at dbPath (":memory:" for an in-memory one) until stop is called.
func Serve(dbPath string) (baseURL string, stop func(), err error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), dbPath, storeopen.Config{Store: stream.Config{Logger: log}})
	if err != nil {
		return "", nil, err
	}
	h, err := server.New(st, server.Config{LongPollTimeout: 500 * time.Millisecond, Logger: log})
	if err != nil {
		st.Close(context.Background())
		return "", nil, err
	}
	// The subscription delivery loop a node runs beside the server: pull-wake subscriptions get
	// their wake events from its passes.
	d := subscriptions.StartDelivery(st, subscriptions.DeliveryConfig{Logger: log})
	ts := httptest.NewServer(h)
	return ts.URL, func() {
		ts.CloseClientConnections()
		ts.Close()
		_ = d.Shutdown(context.Background())
		st.Close(context.Background())
	}, nil
}
