package testsupport

import (
	"fmt"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
)

// ReduceProcessor folds inputs through p's Reduce alone (docs/engine.md#test-support
// reduceProcessor): from the initial state, each input becomes an event at offset i+1 with
// createdAt i+1 seconds after the Unix epoch and path "/"; a malformed payload of a known type is
// skipped, others are normalized; ephemerals are reduced like any other event; "keep" keeps; a
// failing or panicking reduce keeps the state. No consumes filter is applied.
func ReduceProcessor[S any](p foldstream.Processor[S], inputs []foldtype.EventInput) S {
	c := p.Contract()
	state := c.InitialState()
	for i, in := range inputs {
		off := int64(i + 1)
		ev := foldtype.Event{
			Type: in.Type, Payload: in.Payload, Metadata: in.Metadata, Source: in.Source,
			IdempotencyKey: in.IdempotencyKey, Ephemeral: in.Ephemeral, Offset: off,
			CreatedAt: time.Unix(off, 0).UTC().Format("2006-01-02T15:04:05.000Z"), Path: "/",
		}
		norm, typed, err := c.Normalize(ev)
		if err != nil {
			continue
		}
		next, changed, err := reduceGuarded(p, foldstream.ReduceArgs[S]{Event: norm, Payload: typed, State: state})
		if err == nil && changed {
			state = next
		}
	}
	return state
}

func reduceGuarded[S any](p foldstream.Processor[S], args foldstream.ReduceArgs[S]) (next S, changed bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reduce panicked: %v", r)
		}
	}()
	return p.Reduce(args)
}
