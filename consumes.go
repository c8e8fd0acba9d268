package foldstream

import "github.com/foldstream/foldstream/foldtype"

// reducesEvent is the engine's loop guard (docs/engine.md#the-loop-guard): the engine reduces and
// reacts to an event iff [foldtype.ConsumesEvent] accepts it and it is not a live-state delta. The check is
// on the type alone, so no processor ever folds a [foldtype.LiveStateChangedType] event, even when its
// contract names it.
func reducesEvent(consumes []string, ev Event) bool {
	return ev.Type != foldtype.LiveStateChangedType && foldtype.ConsumesEvent(consumes, ev)
}
