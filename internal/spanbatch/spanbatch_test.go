package spanbatch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/foldstream/foldstream/internal/spanbatch"
)

// exporter records the batches it is given; while gate is open (non-nil and not closed) each
// export waits for it.
type exporter struct {
	mu       sync.Mutex
	batches  [][]string
	shutdown bool
	gate     chan struct{}
	entered  chan struct{} // gets a value as an export begins, if not nil
}

func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.entered != nil {
		e.entered <- struct{}{}
	}
	if e.gate != nil {
		<-e.gate
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name()
	}
	e.mu.Lock()
	e.batches = append(e.batches, names)
	e.mu.Unlock()
	return nil
}

func (e *exporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.shutdown = true
	e.mu.Unlock()
	return nil
}

// sizes returns the sizes of the batches exported so far and the spans' names in order.
func (e *exporter) sizes() (sizes []int, names []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.batches {
		sizes = append(sizes, len(b))
		names = append(names, b...)
	}
	return sizes, names
}

func endSpans(tp *sdktrace.TracerProvider, from, n int) {
	tr := tp.Tracer("spanbatch_test")
	for i := range n {
		_, s := tr.Start(context.Background(), fmt.Sprint(from+i))
		s.End()
	}
}

// A full batch is exported without waiting for the batch timeout; fewer spans wait for it, and
// go once it passes. The clock is synctest's: the export goroutine runs until it waits, and an
// hour passes at once.
func TestAFullBatchIsExportedAtOnceAndAPartialOneOnceTheTimeoutPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &exporter{}
		p := spanbatch.New(exp, spanbatch.Options{MaxExportBatchSize: 4, BatchTimeout: time.Hour})
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
		defer tp.Shutdown(context.Background())
		endSpans(tp, 0, 4)
		synctest.Wait()
		if sizes, names := exp.sizes(); len(sizes) != 1 || sizes[0] != 4 || fmt.Sprint(names) != "[0 1 2 3]" {
			t.Fatalf("exported %v in batches of %v, want spans 0 to 3 in one batch at once", names, sizes)
		}
		endSpans(tp, 4, 3) // less than a batch: waits for the hour
		time.Sleep(time.Hour - time.Nanosecond)
		synctest.Wait()
		if s, _ := exp.sizes(); len(s) != 1 {
			t.Fatalf("a partial batch was exported before the timeout: %v", s)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if sizes, names := exp.sizes(); len(sizes) != 2 || sizes[1] != 3 {
			t.Fatalf("after the timeout exported %v in batches of %v, want the 3 spans left in a second batch", names, sizes)
		}
	})
}

// No export is given more than MaxExportBatchSize spans, and they arrive in the order they ended.
func TestAnExportHoldsAtMostMaxExportBatchSizeSpansInOrder(t *testing.T) {
	exp := &exporter{}
	p := spanbatch.New(exp, spanbatch.Options{MaxExportBatchSize: 4, MaxQueueSize: 100, BatchTimeout: time.Hour})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	endSpans(tp, 0, 30)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sizes, names := exp.sizes()
	for _, n := range sizes {
		if n > 4 {
			t.Errorf("a batch of %d spans (batches %v), want at most 4", n, sizes)
		}
	}
	for i, n := range names {
		if n != fmt.Sprint(i) {
			t.Fatalf("spans exported in the order %v", names)
		}
	}
	if len(names) != 30 {
		t.Errorf("exported %d spans, want 30", len(names))
	}
}

// as the SDK's batch processor drops it; those that waited are exported once the exporter is free.
func TestSpansPastMaxQueueSizeAreDroppedAndCounted(t *testing.T) {
	exp := &exporter{gate: make(chan struct{}), entered: make(chan struct{}, 10)}
	reports := make(chan error, 10)
	p := spanbatch.New(exp, spanbatch.Options{MaxQueueSize: 4, MaxExportBatchSize: 2, BatchTimeout: time.Hour,
		OnError: func(err error) { reports <- err }})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	endSpans(tp, 0, 2) // a batch: its export begins and waits at the gate
	<-exp.entered
	endSpans(tp, 2, 6) // four wait, two are dropped
	if got := p.Dropped(); got != 2 {
		t.Errorf("dropped %d, want 2", got)
	}
	close(exp.gate)
	// The export that held the gate returns, and the drops are reported once.
	if err := <-reports; !strings.Contains(err.Error(), "2 spans dropped") {
		t.Errorf("reported %q, want the 2 spans dropped", err)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reports:
		t.Errorf("reported again: %v", err)
	default:
	}
	if _, names := exp.sizes(); fmt.Sprint(names) != "[0 1 2 3 4 5]" {
		t.Errorf("exported %v, want spans 0 to 5", names)
	}
}

// Shutdown exports the spans that wait and shuts the exporter down; a span that ends afterwards
// is not kept.
func TestShutdownExportsWhatWaitsAndShutsTheExporterDown(t *testing.T) {
	exp := &exporter{}
	p := spanbatch.New(exp, spanbatch.Options{BatchTimeout: time.Hour})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	endSpans(tp, 0, 5)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A span of another provider handed to the processor after its Shutdown is ignored.
	_, late := sdktrace.NewTracerProvider().Tracer("late").Start(context.Background(), "late")
	late.End()
	p.OnEnd(late.(sdktrace.ReadOnlySpan))
	if _, names := exp.sizes(); len(names) != 5 || !exp.shutdown {
		t.Errorf("exported %v, exporter shut down %v; want 5 spans and true", names, exp.shutdown)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// ForceFlush exports every span that waits, however few.
func TestForceFlushExportsEverySpanThatWaits(t *testing.T) {
	exp := &exporter{}
	p := spanbatch.New(exp, spanbatch.Options{MaxExportBatchSize: 4, BatchTimeout: time.Hour})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	defer tp.Shutdown(context.Background())
	endSpans(tp, 0, 3)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, names := exp.sizes(); len(names) != 3 {
		t.Errorf("exported %v after ForceFlush, want 3 spans", names)
	}
}

// A span recorded but not sampled (sdktrace.RecordingOnly) is not exported, as with the SDK's
// batch processor.
func TestASpanNotSampledIsNotExported(t *testing.T) {
	exp := &exporter{}
	p := spanbatch.New(exp, spanbatch.Options{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSampler(recordOnly{}))
	endSpans(tp, 0, 3)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, names := exp.sizes(); len(names) != 0 {
		t.Errorf("exported %v, want nothing", names)
	}
}

type recordOnly struct{}

func (recordOnly) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
}
func (recordOnly) Description() string { return "record only" }

// The OTEL_BSP_* variables set the limits Options leave zero; Options given win.
func TestTheOTELBSPVariablesSetTheLimitsOptionsLeaveZero(t *testing.T) {
	t.Setenv(spanbatch.EnvMaxQueueSize, "3")
	t.Setenv(spanbatch.EnvMaxExportBatchSize, "2")
	t.Setenv(spanbatch.EnvScheduleDelay, "3600000")
	exp := &exporter{gate: make(chan struct{}), entered: make(chan struct{}, 10)}
	p := spanbatch.New(exp, spanbatch.Options{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	endSpans(tp, 0, 2) // a batch of the variable's 2
	<-exp.entered
	endSpans(tp, 2, 4) // a queue of the variable's 3: one dropped
	if got := p.Dropped(); got != 1 {
		t.Errorf("dropped %d, want 1 (queue of 3)", got)
	}
	close(exp.gate)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sizes, _ := exp.sizes(); fmt.Sprint(sizes) != "[2 2 1]" {
		t.Errorf("batches %v, want [2 2 1]", sizes)
	}
}
