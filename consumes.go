package foldstream

// reducesEvent is the engine's loop guard (docs/engine.md#the-loop-guard): the engine reduces and
// reacts to an event iff [ConsumesEvent] accepts it and it is not a live-state delta. The check is
// on the type alone, so no processor ever folds a [LiveStateChangedType] event, even when its
// contract names it.
func reducesEvent(consumes []string, ev Event) bool {
	return ev.Type != LiveStateChangedType && ConsumesEvent(consumes, ev)
}
