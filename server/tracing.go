package server

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// tracerName is the instrumentation name of the server's spans: the module's, as the engine's
// (foldstream.TracerName; the server does not link the engine).
const tracerName = "github.com/foldstream/foldstream"

// The start options of the server's two kinds of span, made once: a variadic option list built
// per call is an allocation per span.
var (
	requestSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	appendSpanOptions  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// requestSpanNames holds the name of every request span the server's routes make ("POST
// stream"), so naming a span costs no concatenation; requestSpanName makes any other.
var requestSpanNames = func() map[string]map[string]string {
	names := map[string]map[string]string{}
	for _, route := range []string{"health", "metrics", "processor", "stream", "list", "info", "console", "other"} {
		names[route] = map[string]string{}
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodOptions} {
			names[route][method] = method + " " + route
		}
	}
	return names
}()

// requestSpanName is the name of a request's span: its method and route.
func requestSpanName(method, route string) string {
	if name, ok := requestSpanNames[route][method]; ok {
		return name
	}
	return method + " " + route
}

// spanAttrs is the array a span's attributes are built in before they are set: the most a span of
// the server's has (an append's six).
type spanAttrs [6]attribute.KeyValue

// spanAttrsPool holds the arrays of setSpanAttributes. The attributes passed to a span's
// SetAttributes escape (the span is an interface), so a list built per span would be an
// allocation per span.
var spanAttrsPool = sync.Pool{New: func() any { return new(spanAttrs) }}

// setSpanAttributes sets attrs[:n] on span, then returns attrs to the pool when the span is the
// OpenTelemetry SDK's: its SetAttributes copies the list into the span's own, so the array can be
// used again. Another implementation might keep the list it is given, so its spans keep theirs.
func setSpanAttributes(span trace.Span, attrs *spanAttrs, n int) {
	span.SetAttributes(attrs[:n]...)
	if _, sdk := span.(sdktrace.ReadOnlySpan); sdk {
		*attrs = spanAttrs{}
		spanAttrsPool.Put(attrs)
	}
}

// traceParentKey is the key net/http files a request's traceparent header under (canonical).
const traceParentKey = "Traceparent"

// startRequestSpan starts the server span of r (docs/server.md#tracing), the child of the W3C
// trace context r carries; endRequestSpan ends it.
//
// A span that records goes into the context of the r returned. One that does not (not sampled)
// does not, and r is returned as it is: nothing is started under a span that does not record
// (startAppendSpan), so a request that is not sampled costs the sampler's decision and little
// else. A sampler sees a request span's name (method and route) and kind; its attributes are set
// when it ends, and only when it records.
func (s *Server) startRequestSpan(r *http.Request) (*http.Request, trace.Span) {
	ctx := r.Context()
	// A request without a traceparent has no trace context to extract: looking it up with the
	// canonical key spares the propagator's lookup, which canonicalizes its key (a string) per call.
	if _, ok := r.Header[traceParentKey]; ok {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, span := s.tracer.Start(ctx, requestSpanName(r.Method, s.routeOf(r.URL.Path)), requestSpanOptions...)
	if !span.IsRecording() {
		return r, span
	}
	return r.WithContext(ctx), span
}

// endRequestSpan ends the span of request r, when it records with its attributes: the request's
// method, route and path, its X-Request-Id (which the server's log lines of the request carry
// too) and its status; an error status for a 5xx answer (the server failed), none for a 4xx (the
// client's request was refused, as OpenTelemetry's HTTP conventions have it for a server). The
// attributes go in one call, which grows the span's list once, from an array of the pool.
func (s *Server) endRequestSpan(span trace.Span, r *http.Request, id string, status int) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	attrs := spanAttrsPool.Get().(*spanAttrs)
	attrs[0] = attribute.String("http.request.method", r.Method)
	attrs[1] = attribute.String("http.route", s.routeOf(r.URL.Path))
	attrs[2] = attribute.String("url.path", r.URL.Path)
	attrs[3] = attribute.String("foldstream.request_id", id)
	attrs[4] = attribute.Int("http.response.status_code", status)
	setSpanAttributes(span, attrs, 5)
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// startAppendSpan starts the producer span of one append: from the handler's call into the store
// until the store answered (the group commit included); endAppendSpan ends it. It returns ctx and
// nil without a tracer, and when the span ctx carries (the request's) does not record: a child of
// a span nobody records would be cut off from its trace, and not starting it keeps an unsampled
// append as cheap as it can be.
func (s *Server) startAppendSpan(ctx context.Context) (context.Context, trace.Span) {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	return s.tracer.Start(ctx, "append", appendSpanOptions...)
}

// provenanceCarrier is a copy of the server's provenance rules that the W3C propagator writes an
// append's trace context into, so the copy and the carrier are one allocation.
type provenanceCarrier stream.Provenance

// Get returns the value of key, for propagation.TextMapCarrier.
func (c *provenanceCarrier) Get(key string) string {
	switch key {
	case foldtype.MetadataTraceParent:
		return c.TraceParent
	case foldtype.MetadataTraceState:
		return c.TraceState
	}
	return ""
}

// Set keeps the value of key, for propagation.TextMapCarrier; other keys are dropped.
func (c *provenanceCarrier) Set(key, value string) {
	switch key {
	case foldtype.MetadataTraceParent:
		c.TraceParent = value
	case foldtype.MetadataTraceState:
		c.TraceState = value
	}
}

// Keys lists the keys that hold a value, for propagation.TextMapCarrier.
func (c *provenanceCarrier) Keys() []string {
	var keys []string
	if c.TraceParent != "" {
		keys = append(keys, foldtype.MetadataTraceParent)
	}
	if c.TraceState != "" {
		keys = append(keys, foldtype.MetadataTraceState)
	}
	return keys
}

// tracedProvenance returns prov with the trace context of the append's span in ctx, so the store
// writes it into the appended events that name none (docs/engine.md#tracing); prov itself (shared
// between requests) when the span is not sampled or there are no provenance rules.
func tracedProvenance(ctx context.Context, prov *stream.Provenance) *stream.Provenance {
	if prov == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return prov
	}
	traced := provenanceCarrier(*prov)
	propagation.TraceContext{}.Inject(ctx, &traced)
	return (*stream.Provenance)(&traced)
}

// endAppendSpan ends an append's span, when it records with the attributes of OpenTelemetry's
// messaging conventions for an append to path of size bytes and the tail the append left, or its
// error; the attributes are built in an array of the pool, as a request span's are.
func endAppendSpan(span trace.Span, path string, bytes int, tail int64, err error) {
	if span == nil {
		return
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := spanAttrsPool.Get().(*spanAttrs)
	attrs[0] = attribute.String("messaging.system", "foldstream")
	attrs[1] = attribute.String("messaging.operation.type", "send")
	attrs[2] = attribute.String("messaging.operation.name", "append")
	attrs[3] = attribute.String("messaging.destination.name", path)
	attrs[4] = attribute.Int("messaging.message.body.size", bytes)
	if err != nil {
		setSpanAttributes(span, attrs, 5)
		span.RecordError(err)
		span.SetStatus(codes.Error, "append failed")
	} else {
		attrs[5] = attribute.Int64("foldstream.append.tail", tail)
		setSpanAttributes(span, attrs, 6)
	}
	span.End()
}
