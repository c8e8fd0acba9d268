package stream

import (
	"slices"

	"github.com/foldstream/foldstream"
)

// consumesEvent is a local copy of the one consumes rule (spec §4.4) until the root package's
// foldstream.ConsumesEvent lands: an ephemeral is consumed only when consumes is non-nil and names
// its type; a durable when consumes is nil, contains "*", or names its type.
func consumesEvent(consumes []string, ev foldstream.Event) bool {
	if ev.Ephemeral {
		return consumes != nil && slices.Contains(consumes, ev.Type)
	}
	return consumes == nil || slices.Contains(consumes, "*") || slices.Contains(consumes, ev.Type)
}
