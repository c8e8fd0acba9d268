package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/node"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver: it keeps every span it is sent.
type collector struct {
	srv *httptest.Server
	mu  sync.Mutex
	req []*coltracepb.ExportTraceServiceRequest
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.req = append(c.req, &req)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// spans returns the names of the spans of trace traceID (hex) and the service names their
// resources give.
func (c *collector) spans(traceID string) (names, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.req {
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if hexID(s.TraceId) == traceID {
						names = append(names, s.Name)
						services = append(services, svc)
					}
				}
			}
		}
	}
	return names, services
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, x := range b {
		out = append(out, digits[x>>4], digits[x&15])
	}
	return string(out)
}

// postTraced appends a JSON message as the child of traceID's span.
func postTraced(t *testing.T, base, name, traceID string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/stream/"+name, strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("append: status %d", res.StatusCode)
	}
}

func createJSON(t *testing.T, base, name string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", base+"/v1/stream/"+name, nil)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("create: status %d", res.StatusCode)
	}
}

// TestServeExportsSpansOverOTLPWithOTLPEndpoint: a request carrying a traceparent is traced by
// serve and its spans reach an OTLP/HTTP collector, under the service name foldstream, by the
// time serve has shut down (the batch is flushed on the way out).
func TestServeExportsSpansOverOTLPWithOTLPEndpoint(t *testing.T) {
	col := newCollector(t)
	sc := startServeCmd(t, "--db", filepath.Join(t.TempDir(), "serve.db"), "--otlp-endpoint", col.srv.URL)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	createJSON(t, sc.base, "traced")
	postTraced(t, sc.base, "traced", traceID)
	sc.shutdown(t)
	names, services := col.spans(traceID)
	if len(names) == 0 {
		t.Fatalf("the collector got no span of trace %s (%d export requests)", traceID, len(col.req))
	}
	for i, s := range services {
		if s != "foldstream" {
			t.Errorf("span %q has service.name %q, want foldstream", names[i], s)
		}
	}
	t.Logf("spans of the trace: %v", names)
}

// TestServeExportsSpansToTheEndpointTheOTelEnvironmentNames: OTEL_EXPORTER_OTLP_ENDPOINT turns
// export on without a flag, as OpenTelemetry's conventions say.
func TestServeExportsSpansToTheEndpointTheOTelEnvironmentNames(t *testing.T) {
	col := newCollector(t)
	t.Setenv(node.EnvOTLPEndpoint, col.srv.URL)
	sc := startServeCmd(t, "--db", filepath.Join(t.TempDir(), "serve.db"))
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	createJSON(t, sc.base, "traced")
	postTraced(t, sc.base, "traced", traceID)
	sc.shutdown(t)
	if names, _ := col.spans(traceID); len(names) == 0 {
		t.Fatalf("the collector got no span of trace %s", traceID)
	}
}

// TestServeRefusesABadTraceSampleRatio: a ratio outside 0..1 is refused before serve starts.
func TestServeRefusesABadTraceSampleRatio(t *testing.T) {
	var stderr bytes.Buffer
	err := commands["serve"].run(t.Context(), []string{"--db", filepath.Join(t.TempDir(), "serve.db"), "--addr", "127.0.0.1:0",
		"--otlp-endpoint", "http://127.0.0.1:1", "--trace-sample-ratio", "2"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "trace-sample-ratio") {
		t.Errorf("--trace-sample-ratio 2: %v, want it refused", err)
	}
}
