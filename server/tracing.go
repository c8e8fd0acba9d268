package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/stream"
)

// tracerName is the instrumentation name of the server's spans: the module's, as the engine's
// (foldstream.TracerName; the server does not link the engine).
const tracerName = "github.com/foldstream/foldstream"

// startRequestSpan starts the server span of r (docs/server.md#tracing), the child of the W3C
// trace context r carries, and returns r with the span's context. The span carries the request's
// X-Request-Id, which the server's log lines of the request carry too.
func (s *Server) startRequestSpan(r *http.Request, id string) (*http.Request, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	route := s.routeOf(r.URL.Path)
	ctx, span := s.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path), attribute.String("foldstream.request_id", id)))
	return r.WithContext(ctx), span
}

// endRequestSpan ends a request's span with its status: an error status for a 5xx answer (the
// server failed), none for a 4xx (the client's request was refused, as OpenTelemetry's HTTP
// conventions have it for a server).
func endRequestSpan(span trace.Span, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// startAppendSpan starts the producer span of one append to path: from the handler's call into
// the store until the store answered (the group commit included), with the attributes of
// OpenTelemetry's messaging conventions. Without a tracer it returns ctx and nil.
func (s *Server) startAppendSpan(ctx context.Context, path string, bytes int) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	return s.tracer.Start(ctx, "append", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "foldstream"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "append"), attribute.String("messaging.destination.name", path),
			attribute.Int("messaging.message.body.size", bytes)))
}

// tracedProvenance returns prov with the trace context of the append's span in ctx, so the store
// writes it into the appended events that name none (docs/engine.md#tracing); prov itself (shared
// between requests) when the span is not sampled or there are no provenance rules.
func tracedProvenance(ctx context.Context, prov *stream.Provenance) *stream.Provenance {
	if prov == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return prov
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	traced := *prov
	traced.TraceParent, traced.TraceState = carrier["traceparent"], carrier["tracestate"]
	return &traced
}

// endAppendSpan ends an append's span with the tail the append left, or its error.
func endAppendSpan(span trace.Span, tail int64, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "append failed")
	} else {
		span.SetAttributes(attribute.Int64("foldstream.append.tail", tail))
	}
	span.End()
}
