package server_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// A server with metrics serves them at /metrics; health routes answer load balancers.
func ExampleNewMetrics() {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(context.Background())
	srv, err := server.New(st, server.Config{Logger: quiet, Metrics: server.NewMetrics()})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	for _, p := range []string{server.HealthPath, server.ReadyPath} {
		res, err := http.Get(ts.URL + p)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(p, res.StatusCode)
	}
	res, err := http.Get(ts.URL + server.MetricsPath)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "foldstream_http_requests_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// /healthz 200
	// /readyz 200
	// foldstream_http_requests_total{code="200",method="GET",route="health"} 2
}
