package foldstream

import (
	"errors"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
)

// Cause chains and the loop limit (docs/engine.md#cause-chains). Every event a processor emits
// carries source.cause {chain, depth}: the chain of the event it was processing (or, for an event
// without one, a chain named after that event) one step deeper. Two processors that feed each
// other build one chain whose depth grows with every round trip; an emit deeper than the engine's
// loop limit is not appended. The engine records the loop-limit fact once per chain instead and
// the emit fails with LOOP_LIMIT and data.recorded = true, which ends the loop without failing
// the batch: everything before the limit is committed exactly once.

// DefaultLoopLimit is the deepest cause chain an emit may extend when EngineConfig.LoopLimit is 0.
const DefaultLoopLimit = 32

// causeAfter returns the cause of an event emitted while processing parent (nil: an eventless
// pass, whose emits start no chain).
func causeAfter(parent *Event) *foldtype.Cause {
	if parent == nil {
		return nil
	}
	if parent.Source != nil && parent.Source.Cause != nil && parent.Source.Cause.Chain != "" {
		return &foldtype.Cause{Chain: parent.Source.Cause.Chain, Depth: parent.Source.Cause.Depth + 1}
	}
	return &foldtype.Cause{Chain: fmt.Sprintf("%s@%d", parent.Path, parent.Offset), Depth: 1}
}

// loopLimitError is the recorded LOOP_LIMIT refusal of an emit.
func loopLimitError(slug string, c *foldtype.Cause, limit int) *Error {
	return foldtype.NewError(foldtype.CodeLoopLimit, map[string]any{"slug": slug, "chain": c.Chain, "depth": c.Depth, "limit": limit, "recorded": true},
		"processor %s: cause chain %s would reach depth %d, past the loop limit %d; the loop ends here (recorded as %s)",
		quoteJSON(slug), quoteJSON(c.Chain), c.Depth, limit, foldtype.LoopLimitType)
}

// isRecordedLoopLimit reports whether err is a LOOP_LIMIT whose fact was recorded: the end of a
// loop, not a failure.
func isRecordedLoopLimit(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != foldtype.CodeLoopLimit {
		return false
	}
	rec, _ := e.Data["recorded"].(bool)
	return rec
}
