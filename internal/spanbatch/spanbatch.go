// Package spanbatch hands a tracer provider's ended spans to an exporter in batches, as the
// OpenTelemetry SDK's batch span processor (sdktrace.WithBatcher) does, at less cost per span.
//
// The SDK's processor sends every ended span over a channel to its export goroutine, which
// waits on that channel when it is empty; a server ending spans a few thousand times a second
// then wakes that goroutine (and often a thread to run it) once per span, which costs more CPU
// than the span's own snapshot. Processor keeps the ended spans in a list under a mutex instead,
// and its goroutine wakes when the list holds a batch or when the batch timeout passes: once per
// batch, not once per span.
//
// Its limits are the SDK's and mean the same: at most MaxQueueSize spans wait for export, and a
// span that ends while that many wait is dropped (counted by Dropped), as the SDK's processor
// drops it without WithBlocking; at most MaxExportBatchSize spans go in one export; a span waits
// at most BatchTimeout (plus the export before it) to be exported. Their defaults are the SDK's,
// and OpenTelemetry's OTEL_BSP_* variables set them as they set the SDK's.
package spanbatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OpenTelemetry environment variables that set a Processor's limits when its Options leave
// them zero, as they set the SDK's batch span processor's (the two durations in milliseconds).
const (
	EnvScheduleDelay      = "OTEL_BSP_SCHEDULE_DELAY"
	EnvExportTimeout      = "OTEL_BSP_EXPORT_TIMEOUT"
	EnvMaxQueueSize       = "OTEL_BSP_MAX_QUEUE_SIZE"
	EnvMaxExportBatchSize = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
)

// Options are a Processor's limits; a zero field takes its OTEL_BSP_* variable, or when that is
// unset (or not a positive number) the SDK's default.
type Options struct {
	// MaxQueueSize is the most spans that wait for export; one that ends while that many wait
	// is dropped. Default sdktrace.DefaultMaxQueueSize (2048).
	MaxQueueSize int
	// BatchTimeout is the longest a span waits before its batch is exported, however few spans
	// it holds. Default sdktrace.DefaultScheduleDelay (5 s).
	BatchTimeout time.Duration
	// ExportTimeout bounds one call of the exporter. Default sdktrace.DefaultExportTimeout (30 s).
	ExportTimeout time.Duration
	// MaxExportBatchSize is the most spans one call of the exporter is given; a batch that size
	// is exported without waiting for BatchTimeout. Default sdktrace.DefaultMaxExportBatchSize
	// (512), and never more than MaxQueueSize.
	MaxExportBatchSize int
	// OnError receives what goes wrong in the background: an export that failed (a collector out
	// of reach), and, after an export, how many spans were dropped since the last report because
	// MaxQueueSize spans waited. Default otel.Handle (OpenTelemetry's global error handler).
	OnError func(error)
}

// withDefaults fills o's zero fields from the environment or the SDK's defaults.
func (o Options) withDefaults() Options {
	if o.MaxQueueSize <= 0 {
		o.MaxQueueSize = envInt(EnvMaxQueueSize, sdktrace.DefaultMaxQueueSize)
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = time.Duration(envInt(EnvScheduleDelay, sdktrace.DefaultScheduleDelay)) * time.Millisecond
	}
	if o.ExportTimeout <= 0 {
		o.ExportTimeout = time.Duration(envInt(EnvExportTimeout, sdktrace.DefaultExportTimeout)) * time.Millisecond
	}
	if o.MaxExportBatchSize <= 0 {
		o.MaxExportBatchSize = envInt(EnvMaxExportBatchSize, sdktrace.DefaultMaxExportBatchSize)
	}
	o.MaxExportBatchSize = min(o.MaxExportBatchSize, o.MaxQueueSize)
	if o.OnError == nil {
		o.OnError = otel.Handle
	}
	return o
}

// envInt is the positive integer the variable key holds, or def.
func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}

// Processor is an sdktrace.SpanProcessor that exports ended, sampled spans in batches (see the
// package documentation). Make one with New and give it to the provider with
// sdktrace.WithSpanProcessor; the provider's Shutdown shuts it down, exporting what waits.
type Processor struct {
	exp sdktrace.SpanExporter
	o   Options

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan // ended spans waiting for export, oldest first
	stopped bool                    // Shutdown began: spans that end are not kept

	dropped  atomic.Uint64
	reported uint64 // dropped as of the last report (the export goroutine's)

	full     chan struct{} // a batch waits (capacity 1: one wake-up per batch)
	stop     chan struct{} // closed by Shutdown
	done     chan struct{} // closed when the export goroutine has returned
	stopOnce sync.Once

	exporting sync.Mutex              // one export at a time, in the order the spans ended
	spare     []sdktrace.ReadOnlySpan // the last exported list, emptied, for the next queue
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// New returns a Processor exporting to exp with the limits o (zero fields: see Options), and
// starts its export goroutine.
func New(exp sdktrace.SpanExporter, o Options) *Processor {
	p := &Processor{
		exp:  exp,
		o:    o.withDefaults(),
		full: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.run()
	return p
}

// OnStart does nothing, for sdktrace.SpanProcessor.
func (*Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd keeps s for export when it is sampled, for sdktrace.SpanProcessor; it drops s (counted)
// when MaxQueueSize spans wait, and ignores it after Shutdown. It wakes the export goroutine
// only when the spans waiting make a batch.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	if len(p.queue) >= p.o.MaxQueueSize {
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	p.queue = append(p.queue, s)
	n := len(p.queue)
	p.mu.Unlock()
	if n == p.o.MaxExportBatchSize {
		select {
		case p.full <- struct{}{}:
		default:
		}
	}
}

// Dropped is the number of spans dropped so far because MaxQueueSize spans waited for export.
func (p *Processor) Dropped() uint64 { return p.dropped.Load() }

// run exports what waits each time a batch is full or BatchTimeout passed, until Shutdown.
func (p *Processor) run() {
	defer close(p.done)
	t := time.NewTimer(p.o.BatchTimeout)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		case <-p.full:
		}
		if err := p.export(context.Background(), false); err != nil {
			p.o.OnError(err)
		}
		p.reportDropped()
		t.Reset(p.o.BatchTimeout)
	}
}

// reportDropped reports to OnError the spans dropped since its last report, if any. Export
// goroutine only.
func (p *Processor) reportDropped() {
	if n := p.dropped.Load(); n > p.reported {
		p.o.OnError(fmt.Errorf("%d spans dropped: %d spans waited for export (the most that may)", n-p.reported, p.o.MaxQueueSize))
		p.reported = n
	}
}

// export hands the spans that wait to the exporter, MaxExportBatchSize at a time: all of them
// when all is set, otherwise while at least a batch waits once those taken are exported (a
// remainder waits for the next wake-up). It returns the exporter's errors, after trying every
// batch.
func (p *Processor) export(ctx context.Context, all bool) error {
	p.exporting.Lock()
	defer p.exporting.Unlock()
	var errs []error
	for first := true; ; first = false {
		p.mu.Lock()
		batch := p.queue
		if len(batch) == 0 || (!first && !all && len(batch) < p.o.MaxExportBatchSize) {
			p.mu.Unlock()
			return errors.Join(errs...)
		}
		p.queue, p.spare = p.spare[:0], nil
		p.mu.Unlock()
		for rest := batch; len(rest) > 0; {
			n := min(len(rest), p.o.MaxExportBatchSize)
			if err := p.exportOne(ctx, rest[:n]); err != nil {
				errs = append(errs, err)
			}
			rest = rest[n:]
		}
		clear(batch) // let the collector have the spans
		p.spare = batch[:0]
	}
}

// exportOne calls the exporter with spans, bounded by ExportTimeout.
func (p *Processor) exportOne(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, cancel := context.WithTimeout(ctx, p.o.ExportTimeout)
	defer cancel()
	return p.exp.ExportSpans(ctx, spans)
}

// ForceFlush exports every span that waits, for sdktrace.SpanProcessor; it does nothing after
// Shutdown.
func (p *Processor) ForceFlush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return nil
	}
	return p.export(ctx, true)
}

// Shutdown stops keeping spans, exports those that wait and shuts the exporter down, for
// sdktrace.SpanProcessor; only its first call does anything. It returns ctx's error if ctx ends
// before the export goroutine has stopped.
func (p *Processor) Shutdown(ctx context.Context) error {
	var err error
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		err = errors.Join(p.export(ctx, true), p.exp.Shutdown(ctx))
	})
	return err
}
