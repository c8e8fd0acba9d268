package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
	srv := newServer(t, st, server.Config{Processors: h, Logger: quiet, TracerProvider: tp, LongPollTimeout: 100 * time.Millisecond})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})

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
