package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// With a TracerProvider given to the server and the host, a POST that carries a W3C traceparent
// is traced over HTTP as a user's collector sees it: the server span continues the caller's trace,
// the append is its child, and the processor's ProcessEvent continues the trace the event's
// metadata names.
func TestAnHTTPAppendIsTracedIntoTheProcessorThatRunsIt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	st, err := storeopen.Open(ctx, t.TempDir()+"/traced.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[sourceLog]{Slug: "sources", Version: "1", Consumes: []string{"note.added"}})
	if _, err := host.Register(ctx, h, "/events", sourceRecorder{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	_, ts := serveHosted(t, st, h, server.Config{Processors: h, Logger: quiet, TracerProvider: tp, LongPollTimeout: 100 * time.Millisecond})

	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	const eventTrace, eventSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"type":"note.added","payload":{},"metadata":{"traceparent":"00-` + eventTrace + `-` + eventSpan + `-01"}}`
	res, text := request(t, "POST", ts.URL+"/v1/stream/events", body, "Content-Type", "application/json",
		"traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if res.StatusCode != 204 {
		t.Fatalf("append: %d %s", res.StatusCode, text)
	}
	tail := res.Header.Get("Stream-Next-Offset")
	if res, text := request(t, "GET", ts.URL+"/v1/processor/sources/events?waitUntilProcessed="+tail, ""); res.StatusCode != 200 {
		t.Fatalf("processor: %d %s", res.StatusCode, text)
	}

	// The first span of each name; for ProcessEvent, the one of the appended event (the engine's
	// opening runs an eventless pass first).
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.Name == "ProcessEvent sources" && !hasAttr(s, "foldstream.event.type", "note.added") {
			continue
		}
		if _, seen := byName[s.Name]; !seen {
			byName[s.Name] = s
		}
	}
	post, ok := byName["POST stream"]
	if !ok {
		t.Fatalf("no server span for the POST among %v", names(exp))
	}
	if post.SpanContext.TraceID().String() != callerTrace || post.Parent.SpanID().String() != callerSpan {
		t.Errorf("POST span in trace %s under %s, want the caller's %s under %s", post.SpanContext.TraceID(), post.Parent.SpanID(), callerTrace, callerSpan)
	}
	app, ok := byName["append"]
	if !ok || app.Parent.SpanID() != post.SpanContext.SpanID() {
		t.Errorf("append span %v: want the child of the POST span", ok)
	}
	pe, ok := byName["ProcessEvent sources"]
	if !ok {
		t.Fatalf("no ProcessEvent span among %v", names(exp))
	}
	if pe.SpanContext.TraceID().String() != eventTrace || pe.Parent.SpanID().String() != eventSpan {
		t.Errorf("ProcessEvent in trace %s under %s, want the event's %s under %s", pe.SpanContext.TraceID(), pe.Parent.SpanID(), eventTrace, eventSpan)
	}
	var status int64
	for _, kv := range post.Attributes {
		if kv.Key == "http.response.status_code" {
			status = kv.Value.AsInt64()
		}
	}
	if status != 204 {
		t.Errorf("POST span's status code %d, want 204", status)
	}
}

// samplesNamed is a sampler that records and samples the spans it names and drops every other.
type samplesNamed map[string]bool

func (n samplesNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	if n[p.Name] {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (samplesNamed) Description() string { return "samplesNamed" }

// tracedAppend serves one store on a real SQLite file, traced by a provider sampling with
// sampler into an in-memory exporter, and POSTs one event to a new JSON stream. It returns the
// spans exported and the message as stored.
func tracedAppend(t *testing.T, sampler sdktrace.Sampler, headers ...string) ([]tracetest.SpanStub, string) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
	defer tp.Shutdown(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/traced.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Logger: quiet, TracerProvider: tp})
	ts := httptest.NewServer(srv)
	defer func() {
		srv.Shutdown(context.Background())
		ts.Close()
		st.Close(context.Background())
	}()
	if res, text := request(t, "PUT", ts.URL+"/v1/stream/notes", "", "Content-Type", "application/json"); res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, text)
	}
	exp.Reset()
	res, text := request(t, "POST", ts.URL+"/v1/stream/notes", `{"type":"note.added","payload":{}}`,
		append([]string{"Content-Type", "application/json", "X-Request-Id", "req-1"}, headers...)...)
	if res.StatusCode != 204 {
		t.Fatalf("append: %d %s", res.StatusCode, text)
	}
	spans := exp.GetSpans()
	res, stored := request(t, "GET", ts.URL+"/v1/stream/notes?offset=-1", "")
	if res.StatusCode != 200 {
		t.Fatalf("read: %d %s", res.StatusCode, stored)
	}
	return spans, stored
}

// A recorded POST's spans carry their attributes (set once a span is known to record, not
// given to the sampler), and the event gets the traceparent of its append span.
func TestARecordedAppendsSpansCarryTheirAttributesAndItsTraceparent(t *testing.T) {
	spans, stored := tracedAppend(t, sdktrace.AlwaysSample())
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	post, app := byName["POST stream"], byName["append"]
	for _, want := range []struct {
		span       tracetest.SpanStub
		key, value string
	}{
		{post, "http.request.method", "POST"}, {post, "http.route", "stream"}, {post, "url.path", "/v1/stream/notes"},
		{post, "foldstream.request_id", "req-1"}, {app, "messaging.system", "foldstream"},
		{app, "messaging.operation.type", "send"}, {app, "messaging.destination.name", "/notes"},
	} {
		if !hasAttr(want.span, want.key, want.value) {
			t.Errorf("span %q: no %s=%q among %v", want.span.Name, want.key, want.value, want.span.Attributes)
		}
	}
	if app.Parent.SpanID() != post.SpanContext.SpanID() {
		t.Errorf("append span under %s, want the POST span %s", app.Parent.SpanID(), post.SpanContext.SpanID())
	}
	want := `"traceparent":"00-` + app.SpanContext.TraceID().String() + "-" + app.SpanContext.SpanID().String() + `-01"`
	if !strings.Contains(stored, want) {
		t.Errorf("stored %s, want the append span's %s in its metadata", stored, want)
	}
}

// An append under a request span that is not sampled makes no span of its own, even where the
// sampler would take one named "append" (it would be cut off from its trace), and writes no trace
// context into the event.
func TestAnAppendUnderAnUnsampledRequestMakesNoSpanAndNoTraceContext(t *testing.T) {
	for _, bc := range []struct {
		name    string
		headers []string
	}{
		{"new trace", nil},
		{"caller's unsampled trace", []string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			spans, stored := tracedAppend(t, samplesNamed{"append": true}, bc.headers...)
			if len(spans) != 0 {
				var got []string
				for _, s := range spans {
					got = append(got, s.Name)
				}
				t.Errorf("spans %v, want none", got)
			}
			if strings.Contains(stored, "traceparent") {
				t.Errorf("stored %s, want no trace context", stored)
			}
		})
	}
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key && kv.Value.AsString() == value {
			return true
		}
	}
	return false
}

func names(exp *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

// BenchmarkTracingOverhead serves HEAD requests in process without a TracerProvider, with one
// that samples nothing, and with one that records every span (into a discarding exporter), so
// the differences are what tracing costs a request.
func BenchmarkTracingOverhead(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	for _, bc := range []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{
		{"off", nil},
		{"never-sampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"every-span", sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := server.Config{Logger: quiet}
			if bc.tp != nil {
				cfg.TracerProvider = bc.tp
			}
			srv := newServer(b, st, cfg)
			put := httptest.NewRequest("PUT", "http://127.0.0.1/v1/stream/b", nil)
			put.Header.Set("Content-Type", "text/plain")
			srv.ServeHTTP(httptest.NewRecorder(), put)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, httptest.NewRequest("HEAD", "http://127.0.0.1/v1/stream/b", nil))
				if rec.Code != 200 {
					b.Fatalf("HEAD: %d", rec.Code)
				}
			}
		})
	}
}

// BenchmarkTracingOverheadOnAppend serves the plain-append path in process — one POST of one
// event-shaped JSON message to an in-memory SQLite store — without a TracerProvider, with one
// that samples nothing, and with one that records every span into a no-op exporter (the append's
// traceparent then goes into the stored message's metadata too), so the differences are what
// tracing costs an append (docs/server.md#tracing).
func BenchmarkTracingOverheadOnAppend(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	body := []byte(`{"type":"note.added","payload":{"id":"note-1","text":"a note of some ordinary length, written by a client"}}`)
	for _, bc := range []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{
		{"off", nil},
		{"never-sampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"noop-exporter", sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := server.Config{Logger: quiet}
			if bc.tp != nil {
				cfg.TracerProvider = bc.tp
			}
			srv := newServer(b, st, cfg)
			defer srv.Shutdown(context.Background())
			path := "http://127.0.0.1/v1/stream/append-" + bc.name
			put := httptest.NewRequest("PUT", path, nil)
			put.Header.Set("Content-Type", "application/json")
			srv.ServeHTTP(httptest.NewRecorder(), put)
			b.ReportAllocs()
			began := processCPU()
			for b.Loop() {
				req := httptest.NewRequest("POST", path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				if rec.Code != 204 {
					b.Fatalf("POST: %d %s", rec.Code, rec.Body)
				}
			}
			// The process's CPU time per append (the store's writer included): on a machine
			// shared with other work, wall time mostly measures the wait for a core.
			b.ReportMetric(float64((processCPU()-began).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
