package foldstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
)

// Skip and redrive (docs/operations.md#skip): an operator moves a processor past the event its
// ProcessEvent keeps failing on, and later runs that event again once the cause is fixed.
//
// The rule for the state: a skipped event is set aside whole. Neither its Reduce nor its
// ProcessEvent runs when it is skipped, so the state never holds a change whose effects did not
// run (a processor whose ProcessEvent acts on what Reduce recorded would otherwise see the work
// as done). A redrive reduces it at the point the fold has reached then — after every event the
// processor processed since — and runs its ProcessEvent with that state, as if it had just
// arrived: the processor has moved on, and its state cannot be rewound without running the
// later events' effects again.

// SkipEvent moves the processor past the event at offset without its Reduce or ProcessEvent, as
// one unit of the serial chain. The consumable events before it that the cursor has not passed
// are processed first, as a catch-up would. Then park runs with the event (it stores the event
// where an operator finds it again; its error fails the skip, nothing skipped), and the
// checkpoint is written at offset with the state unchanged, so a restart does not run the event
// again. The recorded failure at offset is cleared. SkipEvent returns the event skipped.
//
// An offset the cursor has passed fails with CONFLICT; one past the stream's tail with CONFLICT.
func (e *Engine[S]) SkipEvent(ctx context.Context, offset int64, park func(ctx context.Context, ev Event) error) (Event, error) {
	var skipped Event
	err := await(ctx, e.enqueue(ctx, func(ctx context.Context) error {
		if err := e.rereduceIfStale(ctx); err != nil {
			return err
		}
		if cur := e.chainCursor(); offset <= cur {
			return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": e.c.Slug(), "offset": offset, "through": cur},
				"skip of %s at offset %d: it has processed through offset %d already; nothing to skip", quoteJSON(e.c.Slug()), offset, cur)
		}
		// The events before it run first: the cursor moves only over events processed or skipped.
		for {
			cur := e.chainCursor()
			if cur >= offset-1 {
				break
			}
			if e.stopping.Load() {
				return e.closedError()
			}
			page, err := e.stream.Read(ctx, cur, EnginePageSize)
			if err != nil {
				return err
			}
			through := min(page.ScannedThroughOffset, offset-1)
			if through <= cur {
				break
			}
			var below []Event
			for _, ev := range page.Events {
				if ev.Offset <= through {
					below = append(below, ev)
				}
			}
			if err := e.commitRange(ctx, below, ScannedRange{After: cur, Through: through}, false, true); err != nil {
				return err
			}
		}
		page, err := e.stream.Read(ctx, offset-1, 1)
		if err != nil {
			return err
		}
		if len(page.Events) == 0 || page.Events[0].Offset != offset {
			return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": e.c.Slug(), "offset": offset},
				"skip of %s at offset %d: the stream has no event there", quoteJSON(e.c.Slug()), offset)
		}
		ev := page.Events[0]
		if err := e.checkMayWork(ctx); err != nil {
			return err
		}
		if err := park(ctx, ev); err != nil {
			return err
		}
		e.mu.Lock()
		state := e.state
		e.mu.Unlock()
		if err := e.persist(ctx, []Event{ev}, offset-1, offset, state, false, false); err != nil {
			return err
		}
		skipped = ev
		return nil
	}))
	return skipped, err
}

// RedriveEvent runs ev, an event the processor was moved past (SkipEvent), as one unit of the
// serial chain: its Reduce at the state the fold has reached, then its ProcessEvent with that
// state, its blockers settled; the new state is checkpointed at the cursor, which does not move.
// A failure is returned as the *ProcessEventError it is and does not make the processor failing:
// the processor went on past ev, and its later events are not held behind it. An event the
// cursor has not passed fails with CONFLICT (it runs in its turn).
func (e *Engine[S]) RedriveEvent(ctx context.Context, ev Event) error {
	return await(ctx, e.enqueue(ctx, func(ctx context.Context) error {
		if err := e.rereduceIfStale(ctx); err != nil {
			return err
		}
		e.mu.Lock()
		cur, state, before := e.cursor, e.state, e.failure
		e.mu.Unlock()
		if ev.Offset > cur {
			return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": e.c.Slug(), "offset": ev.Offset, "through": cur},
				"redrive of %s at offset %d: it has processed through offset %d only; the event runs in its turn",
				quoteJSON(e.c.Slug()), ev.Offset, cur)
		}
		next, changed, _, err := e.step(ctx, &ev, state, false)
		if err != nil {
			e.mu.Lock()
			f := e.failure
			if f != before {
				e.failure = before // the processor itself is not failing: it went on past ev
			}
			e.mu.Unlock()
			if _, refused := errors.AsType[*mayNotWorkError](err); !refused && f != nil && f != before && f.Offset == ev.Offset {
				return f
			}
			return err
		}
		if !changed {
			return nil
		}
		if err := e.checkMayWork(ctx); err != nil {
			return err
		}
		b, err := marshalJSON(next)
		if err != nil {
			return fmt.Errorf("engine %q: marshal state: %w", e.c.Slug(), err)
		}
		if err := e.writeCheckpoint(ctx, Checkpoint{ReducerVersion: e.c.Version(), ReducedThroughOffset: cur, State: b}, true); err != nil {
			return err
		}
		e.mu.Lock()
		e.state = next
		e.mu.Unlock()
		e.publishAndRelease()
		return nil
	}))
}
