// An operator's replay of an engine from an offset (docs/operations.md#replay).
package foldstream_test

import (
	"errors"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// A replay with effects again writes the checkpoint of the state before its offset and returns:
// the range runs again in the engine that catches up next, also a new incarnation after the old
// one closed (a crash between the two runs the range once, not never). A replay with effects none
// then folds the whole log and runs nothing again; a replay from after the cursor is a CONFLICT.
func TestAReplayedCheckpointOutlivesItsEngine(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	effects := &rec[int64]{}
	mk := func() *fn[nState] {
		return &fn[nState]{Base: foldstream.NewBase(nContract(t, "replayed", "1", tickType)), reduce: incN,
			process: func(a *foldstream.ProcessEventArgs[nState]) error {
				if a.Event != nil {
					effects.add(a.Event.Offset)
				}
				return nil
			}}
	}
	ctx := ctxFor(t)
	e1 := newEngine[nState](t, mk(), mem, cps)
	evs := appendT(t, mem, ev(tickType), ev(tickType), ev(tickType), ev(tickType))
	mustDo(t, e1.CatchUpFromLog(ctx))
	from, last := evs[2].Offset, evs[3].Offset
	res, err := e1.Replay(ctx, foldtype.ReplayRequest{From: from, Effects: foldtype.ReplayEffectsAgain})
	mustDo(t, err)
	if res.From != from || res.Through < last || res.Effects != foldtype.ReplayEffectsAgain || res.Reduced != 2 {
		t.Fatalf("the answer: %+v, want from %d through %d or later, effects again, 2 reduced", res, from, last)
	}
	cp, _ := cps.Get("replayed")
	eq(t, "the checkpoint's cursor", cp.ReducedThroughOffset, from-1)
	jsonEq(t, "the checkpoint's state", cp.State, `{"n":2}`)
	mustDo(t, e1.Close(ctx))

	e2 := newEngine[nState](t, mk(), mem, cps)
	mustDo(t, e2.CatchUpFromLog(ctx))
	eq(t, "effects", effects.get(), []int64{evs[0].Offset, evs[1].Offset, from, last, from, last})
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(e2.Snapshot(ctx)).State, nState{4})

	cur := e2.ReducedThroughOffset() // past last: the live state's deltas follow in the log
	res, err = e2.Replay(ctx, foldtype.ReplayRequest{})
	mustDo(t, err)
	if res.From != 1 || res.Through < cur || res.Effects != foldtype.ReplayEffectsNone || res.Reduced != 4 {
		t.Fatalf("the answer: %+v, want from 1 through %d or later, effects none, 4 reduced", res, cur)
	}
	mustDo(t, e2.CatchUpFromLog(ctx))
	eq(t, "effects after a replay with effects none", len(effects.get()), 6)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(e2.Snapshot(ctx)).State, nState{4})
	if _, err := e2.Replay(ctx, foldtype.ReplayRequest{From: 1 << 40}); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("replay from after the cursor: %v, want CONFLICT", err)
	}
}
