package foldstream

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation name of the spans foldstream makes (docs/engine.md#tracing).
const TracerName = "github.com/foldstream/foldstream"

// traceContext reads the W3C trace context an event carries in its metadata ("traceparent" and
// "tracestate", as strings), so a ProcessEvent span continues the trace of whoever appended the
// event. Metadata without them (or not a JSON object) gives ctx unchanged.
func traceContext(ctx context.Context, metadata json.RawMessage) context.Context {
	if len(metadata) == 0 || metadata[0] != '{' {
		return ctx
	}
	var carrier struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	if json.Unmarshal(metadata, &carrier) != nil || carrier.TraceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": carrier.TraceParent, "tracestate": carrier.TraceState})
}

// startProcessEventSpan starts the span of one ProcessEvent call (nil tracer: none, at no cost).
// Its parent is the trace context in the event's metadata, if any; it is linked to the span the
// engine's caller runs in otherwise.
func startProcessEventSpan(ctx context.Context, tracer trace.Tracer, slug string, ev *Event) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("foldstream.processor", slug)}
	if ev != nil {
		attrs = append(attrs, attribute.String("foldstream.stream", ev.Path), attribute.Int64("foldstream.event.offset", ev.Offset),
			attribute.String("foldstream.event.type", ev.Type))
		ctx = traceContext(ctx, ev.Metadata)
	}
	return tracer.Start(ctx, "ProcessEvent "+slug, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// endSpan ends span (if any), recording err as its error status.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
