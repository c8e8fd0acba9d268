package foldtype

import "slices"

// Platform event types the engine knows by name (docs/engine.md#events).
const (
	// LiveStateChangedType is the ephemeral delta a [LiveState] appends
	// (docs/engine.md#live-state). No processor ever reduces it, even when its contract names it
	// (the loop guard, docs/engine.md#the-loop-guard).
	LiveStateChangedType = "events.iterate.com/itx/live-state-changed"
	// WokenType is the wake record a host appends once per incarnation. It is an ordinary durable
	// event: swept by a nil consumes list and by "*" (docs/engine.md#the-consumes-rule).
	WokenType = "events.iterate.com/itx/woken"
	// CreatedType is the birth record a fresh stream appends at offset 1 (docs/engine.md#events).
	CreatedType = "events.iterate.com/itx/created"
	// WorkFailedType is the host's record of a processor whose work it stopped reviving
	// (docs/engine.md#work-that-keeps-dying): payload {"facet": <slug>, "error": <message>}.
	WorkFailedType = "events.iterate.com/itx/work-failed"
)

// ConsumeAll is the consumes entry that sweeps every durable event (never an ephemeral).
const ConsumeAll = "*"

// ConsumesEvent is the one consumes rule (docs/engine.md#the-consumes-rule), shared by the engine,
// subscription delivery and inline reduces:
//
//   - an ephemeral event is consumed only when consumes is non-nil and names its type literally;
//     "*" never matches an ephemeral;
//   - a durable event is consumed when consumes is nil, contains "*", or names its type;
//   - an empty non-nil list consumes nothing.
func ConsumesEvent(consumes []string, ev Event) bool {
	return consumesTyped(consumes, ev.Type, ev.Ephemeral)
}

func consumesTyped(consumes []string, typ string, ephemeral bool) bool {
	if ephemeral {
		return consumes != nil && slices.Contains(consumes, typ)
	}
	if consumes == nil {
		return true
	}
	for _, c := range consumes {
		if c == ConsumeAll || c == typ {
			return true
		}
	}
	return false
}
