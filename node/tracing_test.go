package node_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/node"
)

// TestANodeGivenAnOTLPEndpointExportsItsSpansByShutdown: a program that embeds a node and gives
// it an OTLP endpoint gets what serve --otlp-endpoint gets — a request's spans reach the
// collector over OTLP/HTTP by the time Shutdown returned (the last batch is flushed).
func TestANodeGivenAnOTLPEndpointExportsItsSpansByShutdown(t *testing.T) {
	var exports, bytes atomic.Int64
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			exports.Add(1)
			bytes.Add(int64(len(b)))
		}
	}))
	defer col.Close()
	n, err := node.Start(t.Context(), node.Config{DB: filepath.Join(t.TempDir(), "traced.db"), Addr: "127.0.0.1:0",
		Logger: quiet, OTLPEndpoint: col.URL})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.Addr().String()+"/v1/stream/traced", strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if exports.Load() == 0 || bytes.Load() == 0 {
		t.Fatalf("the collector got %d exports (%d bytes) by the time Shutdown returned, want the request's spans", exports.Load(), bytes.Load())
	}
}
