package foldstream

import (
	"context"
	"encoding/json"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/foldtype"
)

// TracerName is the instrumentation name of the spans foldstream makes (docs/engine.md#tracing).
const TracerName = "github.com/foldstream/foldstream"

// The attributes of OpenTelemetry's messaging semantic conventions the spans carry
// (docs/engine.md#tracing): a stream is the destination, an event's offset its message id, a
// processor's slug the consumer group.
const (
	attrMessagingSystem        = "messaging.system"
	attrMessagingOperationName = "messaging.operation.name"
	attrMessagingOperationType = "messaging.operation.type"
	attrMessagingDestination   = "messaging.destination.name"
	attrMessagingConsumerGroup = "messaging.consumer.group.name"
	attrMessagingMessageID     = "messaging.message.id"
	attrMessagingBatchCount    = "messaging.batch.message_count"
	messagingSystem            = "foldstream"
)

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
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{foldtype.MetadataTraceParent: carrier.TraceParent,
		foldtype.MetadataTraceState: carrier.TraceState})
}

// withSpanContext returns metadata with the trace context of ctx's span added, so the span
// that processes the event continues this one's trace; unchanged when ctx's span is not sampled
// (nothing would be recorded under it) or the metadata names a traceparent of its own.
func withSpanContext(ctx context.Context, metadata json.RawMessage) json.RawMessage {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return metadata
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return foldtype.WithTraceContext(metadata, carrier[foldtype.MetadataTraceParent], carrier[foldtype.MetadataTraceState])
}

// startProcessEventSpan starts the span of one ProcessEvent call (nil tracer: none, at no cost).
// Its parent is the trace context in the event's metadata, if any; it is linked to the span the
// engine's caller runs in otherwise.
func startProcessEventSpan(ctx context.Context, tracer trace.Tracer, slug string, ev *Event) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("foldstream.processor", slug),
		attribute.String(attrMessagingSystem, messagingSystem), attribute.String(attrMessagingOperationType, "process"),
		attribute.String(attrMessagingOperationName, "ProcessEvent"), attribute.String(attrMessagingConsumerGroup, slug)}
	if ev != nil {
		attrs = append(attrs, attribute.String(attrMessagingDestination, ev.Path),
			attribute.String(attrMessagingMessageID, strconv.FormatInt(ev.Offset, 10)),
			attribute.Int64("foldstream.event.offset", ev.Offset), attribute.String("foldstream.event.type", ev.Type))
		ctx = traceContext(ctx, ev.Metadata)
	}
	return tracer.Start(ctx, "ProcessEvent "+slug, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// startBlockerSpan starts the span of one blocker of an event (the n-th registered, from 1), the
// child of the ProcessEvent span in ctx (nil tracer: none).
func startBlockerSpan(ctx context.Context, tracer trace.Tracer, slug string, n int) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	return tracer.Start(ctx, "blocker "+slug, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("foldstream.processor", slug), attribute.Int("foldstream.blocker", n)))
}

// startEmitSpan starts the producer span of one batch a processor emits onto path (nil tracer:
// none); the emitted events carry its trace context.
func startEmitSpan(ctx context.Context, tracer trace.Tracer, slug, path string, n int) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("foldstream.processor", slug),
		attribute.String(attrMessagingSystem, messagingSystem), attribute.String(attrMessagingOperationType, "send"),
		attribute.String(attrMessagingOperationName, "emit"), attribute.Int(attrMessagingBatchCount, n)}
	if path != "" {
		attrs = append(attrs, attribute.String(attrMessagingDestination, path))
	}
	return tracer.Start(ctx, "emit "+slug, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
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
