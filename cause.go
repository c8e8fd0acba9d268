package foldstream

import (
	"errors"
	"fmt"
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

// CodeLoopLimit: an emit would have extended its cause chain past the loop limit.
const CodeLoopLimit Code = "LOOP_LIMIT"

// ErrLoopLimit matches the LOOP_LIMIT error of an emit past the loop limit.
var ErrLoopLimit = &Error{Code: CodeLoopLimit}

// LoopLimitType is the fact the engine records, once per chain, when an emit reached the loop
// limit: payload {"chain": <chain>, "limit": <limit>}, idempotency key
// "processor:loop-limit:<chain>" (ProcessorKeyPrefix: no HTTP writer can take it).
const LoopLimitType = "events.iterate.com/itx/loop-limit-reached"

// causeAfter returns the cause of an event emitted while processing parent (nil: an eventless
// pass, whose emits start no chain).
func causeAfter(parent *Event) *Cause {
	if parent == nil {
		return nil
	}
	if parent.Source != nil && parent.Source.Cause != nil && parent.Source.Cause.Chain != "" {
		return &Cause{Chain: parent.Source.Cause.Chain, Depth: parent.Source.Cause.Depth + 1}
	}
	return &Cause{Chain: fmt.Sprintf("%s@%d", parent.Path, parent.Offset), Depth: 1}
}

// loopLimitError is the recorded LOOP_LIMIT refusal of an emit.
func loopLimitError(slug string, c *Cause, limit int) *Error {
	return NewError(CodeLoopLimit, map[string]any{"slug": slug, "chain": c.Chain, "depth": c.Depth, "limit": limit, "recorded": true},
		"processor %s: cause chain %s would reach depth %d, past the loop limit %d; the loop ends here (recorded as %s)",
		quoteJSON(slug), quoteJSON(c.Chain), c.Depth, limit, LoopLimitType)
}

// isRecordedLoopLimit reports whether err is a LOOP_LIMIT whose fact was recorded: the end of a
// loop, not a failure.
func isRecordedLoopLimit(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeLoopLimit {
		return false
	}
	rec, _ := e.Data["recorded"].(bool)
	return rec
}

// StampOrigin returns inputs with source.origin set to path on every input whose source has no
// origin; inputs without a source keep none. Streams call it before storing (the store and
// testsupport.MemoryStream do).
func StampOrigin(path string, inputs []EventInput) []EventInput {
	var out []EventInput
	for i, in := range inputs {
		if in.Source == nil || in.Source.Origin != "" {
			continue
		}
		if out == nil {
			out = append([]EventInput(nil), inputs...)
		}
		src := *in.Source
		src.Origin = path
		out[i].Source = &src
	}
	if out == nil {
		return inputs
	}
	return out
}
