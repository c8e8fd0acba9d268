package server_test

import (
	"context"
	"encoding/json"
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
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// tracedNode is one node of a cluster on PostgreSQL whose spans go to its own in-memory exporter,
// as two processes' spans go to two exporters.
type tracedNode struct {
	url   string
	h     *host.Host
	spans *tracetest.InMemoryExporter
}

func startTracedNode(t *testing.T, db, name string) *tracedNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	st, err := storeopen.Open(context.Background(), db, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	n := &tracedNode{url: "http://" + ts.Listener.Addr().String(), spans: exp}
	if n.h, err = host.New(st, host.Config{Logger: quiet, NodeID: name, Addr: n.url, TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Processors: n.h, Logger: quiet, TracerProvider: tp})
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = n.h.Shutdown(context.Background())
		_ = st.Close(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	return n
}

// shipper emits "shipped" from a blocker for every "ordered" event.
type shipper struct{ foldstream.Base[struct{}] }

func (shipper) Reduce(a foldstream.ReduceArgs[struct{}]) (struct{}, bool, error) {
	return a.State, false, nil
}

func (p shipper) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil || a.Event.Type != "ordered" {
		return nil
	}
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldstream.EventInput{Type: "shipped", IdempotencyKey: p.IdempotencyKey("ship", a.Event)})
		return err
	})
	return nil
}

// notifier consumes "shipped" and does nothing else: its ProcessEvent span is what the test looks for.
type notifier struct{ foldstream.Base[struct{}] }

func (notifier) Reduce(a foldstream.ReduceArgs[struct{}]) (struct{}, bool, error) {
	return a.State, false, nil
}

// One event's spans across two nodes share a trace. The HTTP append is made on
// node A; the processor that consumes the event runs on node B only (B alone registered it) and
// emits from a blocker; the processor that consumes the emitted event runs on A only. Each node
// exports to its own exporter, as two processes do: the spans on both, from the POST on A through
// ProcessEvent and the emit on B to the downstream ProcessEvent on A, are one trace, each the
// child of the one before.
func TestOneEventsSpansAcrossTwoNodesShareATrace(t *testing.T) {
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startTracedNode(t, db, "a")
	b := startTracedNode(t, db, "b")
	ship := shipper{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{
		Slug: "shipper", Version: "1", Consumes: []string{"ordered"}, Emits: []string{"shipped"}}))}
	if _, err := host.Register(ctx, b.h, "/orders", ship); err != nil {
		t.Fatal(err)
	}
	notify := notifier{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{
		Slug: "notifier", Version: "1", Consumes: []string{"shipped"}}))}
	if _, err := host.Register(ctx, a.h, "/orders", notify); err != nil {
		t.Fatal(err)
	}

	const callerTrace = "0af7651916cd43dd8448eb211c80319c"
	res, text := request(t, "POST", a.url+"/v1/stream/orders", `{"type":"ordered","payload":{"id":7},"metadata":{"channel":"web"}}`,
		"Content-Type", "application/json", "traceparent", "00-"+callerTrace+"-b7ad6b7169203331-01")
	if res.StatusCode != 204 {
		t.Fatalf("append on A: %d %s", res.StatusCode, text)
	}

	find := func(exp *tracetest.InMemoryExporter, name, eventType string) (tracetest.SpanStub, bool) {
		for _, s := range exp.GetSpans() {
			if s.Name == name && (eventType == "" || hasAttr(s, "foldstream.event.type", eventType)) {
				return s, true
			}
		}
		return tracetest.SpanStub{}, false
	}
	var downstream tracetest.SpanStub
	if !wait.For(30*time.Second, func() bool {
		var ok bool
		downstream, ok = find(a.spans, "ProcessEvent notifier", "shipped")
		return ok
	}) {
		t.Fatalf("node A never processed the shipped event; A's spans %v, B's %v", names(a.spans), names(b.spans))
	}
	appendA, _ := find(a.spans, "append", "")
	processB, okP := find(b.spans, "ProcessEvent shipper", "ordered")
	emitB, okE := find(b.spans, "emit shipper", "")
	if !okP || !okE {
		t.Fatalf("node B's spans %v: want ProcessEvent and emit of the shipper", names(b.spans))
	}
	for _, s := range []struct {
		what   string
		span   tracetest.SpanStub
		parent trace.SpanID
	}{
		{"the append on A", appendA, appendA.Parent.SpanID()},
		{"ProcessEvent on B", processB, appendA.SpanContext.SpanID()},
		{"the emit on B", emitB, emitB.Parent.SpanID()},
		{"the downstream ProcessEvent on A", downstream, emitB.SpanContext.SpanID()},
	} {
		if got := s.span.SpanContext.TraceID().String(); got != callerTrace {
			t.Errorf("%s is in trace %s, want the caller's %s", s.what, got, callerTrace)
		}
		if s.span.Parent.SpanID() != s.parent {
			t.Errorf("%s is the child of %s, want %s", s.what, s.span.Parent.SpanID(), s.parent)
		}
	}
	if !processB.Parent.IsRemote() || !downstream.Parent.IsRemote() {
		t.Error("a ProcessEvent's parent is not the remote span named in the event's metadata")
	}

	// What a reader gets: the appended event's metadata keeps the writer's members and names the
	// append's span; the emitted event's names the emit's.
	res, text = request(t, "GET", a.url+"/v1/stream/orders?offset=-1", "")
	if res.StatusCode != 200 {
		t.Fatalf("read: %d %s", res.StatusCode, text)
	}
	var evs []struct {
		Type     string            `json:"type"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(text), &evs); err != nil || len(evs) < 2 {
		t.Fatalf("read: %s (%v), want the ordered and the shipped event", text, err)
	}
	byType := map[string]map[string]string{}
	for _, e := range evs {
		byType[e.Type] = e.Metadata
	}
	if m := byType["ordered"]; m["channel"] != "web" || !strings.Contains(m["traceparent"], appendA.SpanContext.SpanID().String()) {
		t.Errorf("the ordered event's metadata %v, want its channel and the append's span %s", m, appendA.SpanContext.SpanID())
	}
	if m := byType["shipped"]; !strings.Contains(m["traceparent"], emitB.SpanContext.SpanID().String()) {
		t.Errorf("the shipped event's metadata %v, want the emit's span %s", m, emitB.SpanContext.SpanID())
	}
}
