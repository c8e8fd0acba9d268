package foldstream

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
)

// Replay rebuilds the processor's state from the log on the operator's word
// (docs/operations.md#replay), as one unit of the serial chain, and returns when the rebuilt
// checkpoint is written.
//
// With effects none (the default) it folds every event the processor consumes, from the
// contract's initial state through the offset it has processed (no ProcessEvent, nothing
// emitted), and writes that state as its checkpoint at the same offset: the state is the fold of
// the log, and events after it run as new work. With effects again it folds the events before
// req.From and writes that state as the checkpoint at req.From-1: the next unit of the chain (the
// catch-up Replay does not wait for, a push's gap repair, a read's catch-up) runs ProcessEvent
// again, with its effects and emits, for every event from req.From on. Either way the checkpoint
// is written in one fenced write, so a crash leaves the old one or the new one; it is then
// published (with effects again the cursor callers see goes back to req.From-1, so
// WaitUntilProcessed waits for the replayed range to run again).
//
// A req.From below 0 or an unknown Effects fails with BAD_REQUEST; a req.From after the offset
// the processor has processed fails with CONFLICT (nothing there was processed yet).
func (e *Engine[S]) Replay(ctx context.Context, req foldtype.ReplayRequest) (foldtype.ReplayResult, error) {
	req, err := foldtype.CheckReplay(req)
	if err != nil {
		return foldtype.ReplayResult{}, err
	}
	from, effects := req.From, req.Effects
	var res foldtype.ReplayResult
	err = await(ctx, e.enqueue(ctx, func(ctx context.Context) error {
		if e.stopping.Load() {
			return e.closedError() // stopped, or switched to a rebuilt version: its processor is another engine's
		}
		if err := e.rereduceIfStale(ctx); err != nil {
			return err
		}
		through := e.chainCursor()
		if from > through {
			return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": e.c.Slug(), "from": from, "through": through},
				"replay of %s from offset %d: it has processed through offset %d only; nothing there to replay",
				quoteJSON(e.c.Slug()), from, through)
		}
		target := through
		if effects == foldtype.ReplayEffectsAgain {
			target = from - 1
		}
		state, n, err := e.foldThrough(ctx, target)
		if err != nil {
			return err
		}
		b, err := marshalJSON(state)
		if err != nil {
			return fmt.Errorf("engine %q: marshal state: %w", e.c.Slug(), err)
		}
		if err := e.checkMayWork(ctx); err != nil {
			return err // not this engine's processor any more: the owner's replay, not this one
		}
		if err := e.writeCheckpoint(ctx, Checkpoint{ReducerVersion: e.c.Version(), ReducedThroughOffset: target, State: b}, true); err != nil {
			return err
		}
		e.mu.Lock()
		e.state, e.cursor = state, target
		e.liveWhole = true // the live view is the old state's until the rebuilt one is published
		e.mu.Unlock()
		// With effects again the cursor goes back to req.From-1: reads and waits see the
		// processor catching up again through the replayed range.
		e.publishAndRelease()
		res = foldtype.ReplayResult{From: from, Through: through, Effects: effects, Reduced: n}
		return nil
	}))
	return res, err
}

// foldThrough folds, from the contract's initial state and without ProcessEvent, every event
// the processor consumes through offset target, and returns the state and how many events it
// reduced. An event its reducer refuses is skipped (reported), as the re-reduce skips it.
func (e *Engine[S]) foldThrough(ctx context.Context, target int64) (S, int, error) {
	state := e.c.InitialState()
	var pos int64
	n := 0
	for pos < target {
		page, err := e.stream.Read(ctx, pos, EnginePageSize)
		if err != nil {
			return state, 0, err
		}
		for _, ev := range page.Events {
			if ev.Offset > target || !reducesEvent(e.consumes, ev) {
				continue
			}
			n++
			if next, ch, _, ok := e.normalizeAndReduce(&ev, state); ok && ch {
				state = next
			}
		}
		if page.ScannedThroughOffset <= pos {
			break
		}
		pos = min(page.ScannedThroughOffset, target)
	}
	return state, n, nil
}
