package foldstream

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/foldtype"
)

// One ProcessEvent's run (eventRun): the events it emits, its blockers (BlockProcessorWhile) run
// in order until a fixed point, and the MayWork check before each unit that can start an effect.

// eventRun is the engine-side state of one ProcessEvent call.
type eventRun struct {
	ctx        context.Context
	stream     Stream
	slug       string
	version    string
	emits      []string
	event      *Event
	loopLimit  int
	background func(ctx context.Context, work func(context.Context) error)
	mayWork    func(ctx context.Context) error
	metrics    EngineMetrics // nil: nothing counted
	tracer     trace.Tracer  // nil: no spans, and no trace context written into emitted events
	retry      writeRetry    // an emitted batch through a database blip

	mu       sync.Mutex
	blockers []func(context.Context) error
	settled  bool
}

func (r *eventRun) append(ctx context.Context, events []EventInput) ([]Event, error) {
	for _, ev := range events {
		if !slices.Contains(r.emits, ev.Type) {
			return nil, foldtype.NewError(foldtype.CodeUndeclaredEmit, map[string]any{"slug": r.slug, "type": ev.Type},
				"processor %s emits %s without declaring it", quoteJSON(r.slug), quoteJSON(ev.Type))
		}
	}
	cause := causeAfter(r.event)
	if cause != nil && cause.Depth > r.loopLimit && len(events) > 0 {
		return nil, r.recordLoopLimit(ctx, cause)
	}
	var span trace.Span
	if r.tracer != nil {
		// The emitted batch's producer span is the child of the span the processor appends
		// from (a blocker's, or ProcessEvent's when ctx carries none), and its trace context goes
		// into every emitted event that names none, so whoever processes them continues the trace
		// (docs/engine.md#tracing). A retry's emission differs from the first only there, which
		// the store does not compare (foldtype.SameIdempotentEvent).
		parent := ctx
		if !trace.SpanContextFromContext(ctx).IsValid() {
			parent = trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(r.ctx))
		}
		path := ""
		if r.event != nil {
			path = r.event.Path
		}
		ctx, span = startEmitSpan(parent, r.tracer, r.slug, path, len(events))
	}
	stamped := make([]EventInput, len(events))
	for i, ev := range events {
		if span != nil {
			ev.Metadata = withSpanContext(ctx, ev.Metadata)
		}
		ps := &foldtype.ProcessorSource{Slug: r.slug, Version: r.version}
		if r.event != nil {
			ps.WhileProcessing = &foldtype.WhileProcessing{Offset: r.event.Offset, Type: r.event.Type}
		}
		ev.Source = &foldtype.Source{Processor: ps, Cause: cause}
		ev.IdempotencyKey = processorKey(ev.IdempotencyKey)
		stamped[i] = ev
	}
	// Sent again through a database blip, as it was (docs/engine.md#writes-through-a-database-blip);
	// the stream guards every attempt as it guards the first (a host's refuses a lease lost).
	out, err := r.stream.Append(ctx, stamped...)
	if err != nil {
		err = r.retry.after(ctx, err, "emit",
			func() bool {
				return !slices.ContainsFunc(stamped, func(in EventInput) bool { return !in.Ephemeral && in.IdempotencyKey == "" })
			},
			nil, func() error {
				var aerr error
				out, aerr = r.stream.Append(ctx, stamped...)
				return aerr
			})
	}
	endSpan(span, err)
	if err == nil && r.metrics != nil && len(stamped) > 0 {
		r.metrics.EventsEmitted(len(stamped))
	}
	return out, err
}

// recordLoopLimit appends the loop-limit fact of cause's chain — once per chain: its idempotency
// key and body depend on the chain and the limit only, so every processor that reaches the limit on
// the chain, and every retry, names the same event — and returns the recorded LOOP_LIMIT.
func (r *eventRun) recordLoopLimit(ctx context.Context, cause *foldtype.Cause) error {
	fact := EventInput{Type: foldtype.LoopLimitType,
		Payload: JSON(map[string]any{"chain": cause.Chain, "limit": r.loopLimit}),
		Source:  &foldtype.Source{Cause: cause},
		// In the processor namespace, which HTTP writers cannot take: nobody can wedge the
		// fact with a conflicting event under its key.
		IdempotencyKey: processorKey("loop-limit:" + cause.Chain)}
	if _, err := r.stream.Append(ctx, fact); err != nil {
		return err
	}
	return loopLimitError(r.slug, cause, r.loopLimit)
}

func (r *eventRun) block(work func(context.Context) error) {
	r.mu.Lock()
	if r.settled {
		r.mu.Unlock()
		if r.background != nil {
			r.background(r.ctx, work)
		}
		return
	}
	r.blockers = append(r.blockers, work)
	r.mu.Unlock()
}

// drain runs the blockers in FIFO order until a fixed point; the first failure stops it.
func (r *eventRun) drain() error {
	for i := 0; ; i++ {
		r.mu.Lock()
		if i >= len(r.blockers) {
			r.settled = true
			r.mu.Unlock()
			return nil
		}
		work := r.blockers[i]
		r.mu.Unlock()
		if r.mayWork != nil {
			if err := r.mayWork(r.ctx); err != nil {
				r.mu.Lock()
				r.settled = true
				r.mu.Unlock()
				return err
			}
		}
		ctx, span := startBlockerSpan(r.ctx, r.tracer, r.slug, i+1)
		err := callGuarded(func() error { return work(ctx) })
		if err != nil && !isRecordedLoopLimit(err) {
			endSpan(span, err)
			r.mu.Lock()
			r.settled = true
			r.mu.Unlock()
			return err
		}
		endSpan(span, nil)
	}
}

// mayNotWorkError is MayWork's refusal, as the engine passes it on: the work it was asked about
// did not start. It unwraps to MayWork's answer.
type mayNotWorkError struct{ err error }

func (e *mayNotWorkError) Error() string { return e.err.Error() }

func (e *mayNotWorkError) Unwrap() error { return e.err }

// checkMayWork asks MayWork whether a unit of work may start (nil when none is set).
func (e *Engine[S]) checkMayWork(ctx context.Context) error {
	if e.mayWork == nil {
		return nil
	}
	if err := e.mayWork(ctx); err != nil {
		return &mayNotWorkError{err}
	}
	return nil
}

// callGuarded calls f and turns a panic into an error.
func callGuarded(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}
