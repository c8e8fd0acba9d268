package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// keepingSpan is a span of another implementation than the SDK's, which keeps the attribute list
// it is given.
type keepingSpan struct {
	noop.Span
	attrs []attribute.KeyValue
}

func (*keepingSpan) IsRecording() bool { return true }

func (s *keepingSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = kv }

// The arrays span attributes are built in are used again only after an SDK span copied them: a
// span of another implementation keeps its list unchanged however many spans end after it, and
// an SDK span's attributes are its own whatever the spans before it had (an append that failed
// has no tail).
func TestASpansAttributesAreNotOverwrittenByTheNextSpans(t *testing.T) {
	s := &Server{cfg: Config{Prefix: DefaultPrefix}}
	r := httptest.NewRequest("POST", "http://127.0.0.1"+DefaultPrefix+"a", nil)
	kept := &keepingSpan{}
	s.endRequestSpan(kept, r, "first", 204)
	want := []attribute.KeyValue{attribute.String("http.request.method", "POST"), attribute.String("http.route", "stream"),
		attribute.String("url.path", DefaultPrefix+"a"), attribute.String("foldstream.request_id", "first"),
		attribute.Int("http.response.status_code", 204)}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	for i := range 3 {
		_, span := tr.Start(context.Background(), "append")
		var err error
		if i == 2 {
			err = errors.New("refused")
		}
		endAppendSpan(span, "other", 7, 42, err)
		_, span = tr.Start(context.Background(), "request")
		s.endRequestSpan(span, httptest.NewRequest("GET", "http://127.0.0.1/else", nil), "later", 500)
	}
	if len(kept.attrs) != len(want) {
		t.Fatalf("kept %d attributes, want %d", len(kept.attrs), len(want))
	}
	for i := range want {
		if kept.attrs[i] != want[i] {
			t.Errorf("another implementation's attribute %d became %v, was %v", i, kept.attrs[i], want[i])
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 6 {
		t.Fatalf("%d spans exported, want 6", len(spans))
	}
	for i, sp := range spans {
		var keys []attribute.Key
		for _, kv := range sp.Attributes {
			keys = append(keys, kv.Key)
			if kv.Key == "foldstream.request_id" && kv.Value.AsString() != "later" ||
				kv.Key == "messaging.destination.name" && kv.Value.AsString() != "other" {
				t.Errorf("span %d (%s): %s = %s", i, sp.Name, kv.Key, kv.Value.Emit())
			}
		}
		switch {
		case sp.Name == "request" && len(keys) != 5:
			t.Errorf("request span %d has attributes %v, want 5", i, keys)
		case sp.Name == "append" && i < 4 && len(keys) != 6:
			t.Errorf("append span %d has attributes %v, want 6", i, keys)
		case sp.Name == "append" && i == 4 && len(keys) != 5:
			t.Errorf("the failed append's span has attributes %v, want 5 (no tail)", keys)
		}
	}
}

var _ trace.Span = (*keepingSpan)(nil)
