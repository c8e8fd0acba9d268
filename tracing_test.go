package foldstream_test

import (
	"context"
	"errors"
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
	if attrs["foldstream.processor"] != "payments" || attrs["foldstream.event.type"] != "ordered" || attrs["foldstream.event.offset"] != int64(1) || attrs["foldstream.stream"] == nil {
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
