package foldstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

type traced struct {
	foldstream.Base[struct{}]
	tracer trace.Tracer
}

func (traced) Reduce(a foldstream.ReduceArgs[struct{}]) (struct{}, bool, error) {
	return a.State, false, nil
}

func (p traced) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil {
		return nil
	}
	_, effect := p.tracer.Start(a.Context(), "charge")
	effect.End()
	if a.Event.Type == "broken" {
		return errors.New("the payment provider refused")
	}
	return nil
}

// With a TracerProvider every ProcessEvent call is a span of its own: named after the processor,
// with the stream, offset and type; the child of the trace context in the event's metadata (so
// the trace of whoever appended the event goes on into the processor); the parent of the spans the
// processor's effects start from ProcessEventArgs.Context; an error status when it fails.
func TestProcessEventSpansContinueTheTraceInTheEventsMetadata(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c := foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{Slug: "payments", Version: "1", Consumes: []string{"ordered", "broken"}})
	mem := testsupport.NewMemoryStream()
	p := traced{Base: foldstream.NewBase(c), tracer: tp.Tracer("app")}
	eng, err := foldstream.NewEngine[struct{}](p, foldstream.EngineConfig{Stream: mem, Checkpoints: testsupport.MemoryCheckpoints(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	mem.Register(eng)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	appendT(t, mem, foldstream.EventInput{Type: "ordered", Metadata: foldstream.JSON(map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})})
	appendT(t, mem, foldstream.EventInput{Type: "broken"})
	settle(t, mem)

	var pe, charges []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "ProcessEvent payments":
			pe = append(pe, s)
		case "charge":
			charges = append(charges, s)
		}
	}
	if len(pe) < 2 || len(charges) < 2 {
		t.Fatalf("spans: %d ProcessEvent, %d charge; want at least 2 of each (%v)", len(pe), len(charges), exp.GetSpans().Snapshots())
	}
	first := pe[0]
	if got := first.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("ProcessEvent's trace %s, want the event's %s", got, traceID)
	}
	if got := first.Parent.SpanID().String(); got != parentID || !first.Parent.IsRemote() {
		t.Errorf("ProcessEvent's parent %s (remote %v), want the event's span %s", got, first.Parent.IsRemote(), parentID)
	}
	attrs := map[string]any{}
	for _, kv := range first.Attributes {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if attrs["foldstream.processor"] != "payments" || attrs["foldstream.event.type"] != "ordered" || attrs["foldstream.event.offset"] != int64(1) ||
		attrs["messaging.destination.name"] == nil || attrs["messaging.message.id"] != "1" || attrs["messaging.operation.type"] != "process" ||
		attrs["messaging.consumer.group.name"] != "payments" {
		t.Errorf("ProcessEvent's attributes: %v", attrs)
	}
	if charges[0].Parent.SpanID() != first.SpanContext.SpanID() {
		t.Error("the effect's span is not the child of its ProcessEvent span")
	}
	if first.Status.Code == codes.Error {
		t.Errorf("a ProcessEvent that succeeded has status %v", first.Status)
	}
	failed := pe[1]
	if failed.Status.Code != codes.Error || failed.Status.Description != "the payment provider refused" {
		t.Errorf("a failed ProcessEvent's status: %+v, want the error", failed.Status)
	}
	if failed.SpanContext.TraceID().String() == traceID {
		t.Error("an event without a trace context joined another event's trace")
	}
}

// An event's trace goes on through what a processor emits: the emitted batch is a producer span
// under the blocker that emitted it, under ProcessEvent; the emitted event's metadata names that
// span, so the downstream processor's ProcessEvent joins the same trace. A retried ProcessEvent
// emits again under a new span: the store takes it as the first emission (the trace context is
// not part of an event's identity), so the processor is not parked on a conflict.
func TestAnEmittedEventCarriesTheTraceOfTheEventThatCausedIt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx := ctxFor(t)
	shipper := &fn[seenState]{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[seenState]{
		Slug: "shipper", Version: "1", Consumes: []string{"ordered"}, Emits: []string{"shipped"},
		Initial: func() (seenState, error) { return seenState{Seen: []string{}}, nil }})), reduce: appendSeen, project: projectNull[seenState]}
	var attempts atomic.Int32
	shipper.process = func(a *foldstream.ProcessEventArgs[seenState]) error {
		if a.Event == nil {
			return nil
		}
		a.BlockProcessorWhile(func(ctx context.Context) error {
			if _, err := a.Append(ctx, foldstream.EventInput{Type: "shipped", IdempotencyKey: shipper.IdempotencyKey("ship", a.Event)}); err != nil {
				return err
			}
			if attempts.Add(1) == 1 {
				return errors.New("the carrier timed out after the emit")
			}
			return nil
		})
		return nil
	}
	notifier := newEph(t, "notifier", "shipped")
	mem := testsupport.NewMemoryStream()
	traced := func(c *foldstream.EngineConfig) { c.TracerProvider = tp }
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	appendT(t, mem, foldstream.EventInput{Type: "ordered", Metadata: foldstream.JSON(map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})})
	ship := newEngine[seenState](t, shipper, mem, testsupport.MemoryCheckpoints(), traced)
	defer ship.Close(context.Background())
	if err := ship.CatchUpFromLog(ctx); err == nil {
		t.Fatal("first attempt: want the carrier's failure")
	}
	if err := ship.CatchUpFromLog(ctx); err != nil {
		t.Fatalf("retry: %v (a retried emission under a new span must be the first one)", err)
	}
	shipped := mem.EventsOfType("shipped")
	if len(shipped) != 1 {
		t.Fatalf("%d shipped events, want 1", len(shipped))
	}
	notify := newEngine[seenState](t, notifier, mem, testsupport.MemoryCheckpoints(), traced)
	defer notify.Close(context.Background())
	if err := notify.CatchUpFromLog(ctx); err != nil {
		t.Fatal(err)
	}

	byID := map[trace.SpanID]tracetest.SpanStub{}
	var emits []tracetest.SpanStub
	var downstream *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		byID[s.SpanContext.SpanID()] = s
		switch {
		case s.Name == "emit shipper":
			emits = append(emits, s)
		case s.Name == "ProcessEvent notifier" && hasAttr(s, "foldstream.event.type", "shipped"):
			downstream = &s
		}
	}
	if len(emits) != 2 {
		t.Fatalf("%d emit spans, want one per attempt (%v)", len(emits), exp.GetSpans().Snapshots())
	}
	for _, e := range emits {
		if e.SpanContext.TraceID().String() != traceID || e.SpanKind != trace.SpanKindProducer {
			t.Errorf("emit span in trace %s, kind %v; want the ordered event's trace, producer", e.SpanContext.TraceID(), e.SpanKind)
		}
		blocker := byID[e.Parent.SpanID()]
		if blocker.Name != "blocker shipper" || byID[blocker.Parent.SpanID()].Name != "ProcessEvent shipper" {
			t.Errorf("emit span's parent %q under %q, want a blocker under ProcessEvent", blocker.Name, byID[blocker.Parent.SpanID()].Name)
		}
		if !hasAttr(e, "messaging.operation.type", "send") || !hasAttr(e, "messaging.system", "foldstream") {
			t.Errorf("emit span's attributes: %v", e.Attributes)
		}
	}
	want := "00-" + traceID + "-" + emits[0].SpanContext.SpanID().String() + "-01"
	if got := string(shipped[0].Metadata); got != `{"traceparent":"`+want+`"}` {
		t.Errorf("the shipped event's metadata %s, want the first emission's span %s", got, want)
	}
	if downstream == nil {
		t.Fatalf("no ProcessEvent span of the shipped event (%v)", exp.GetSpans().Snapshots())
	}
	if downstream.SpanContext.TraceID().String() != traceID || downstream.Parent.SpanID() != emits[0].SpanContext.SpanID() {
		t.Errorf("downstream ProcessEvent in trace %s under %s, want trace %s under the emit span %s",
			downstream.SpanContext.TraceID(), downstream.Parent.SpanID(), traceID, emits[0].SpanContext.SpanID())
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
