package foldstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// SkipEvent moves the engine past the event it fails on without its Reduce or ProcessEvent:
// park sees the event before the checkpoint moves; the checkpoint records the move, so a new
// engine on it runs the event neither; the failure is cleared. RedriveEvent then reduces it at the
// state the engine has reached and runs its ProcessEvent, keeping the cursor; a failing redrive
// answers its ProcessEventError and leaves the engine without a failure. A skip behind the cursor
// and a redrive ahead of it are CONFLICT.
func TestSkipEventMovesPastTheFailingEventAndRedriveEventRunsItAtTheCurrentState(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	var ran []int64
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "skipper", "1", "e", "bad")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			if a.Event.Type == "bad" && broken.Load() {
				return errors.New("poison")
			}
			ran = append(ran, a.Event.Offset)
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	evs := appendT(t, mem, ev("e"), ev("bad"), ev("e"))
	ctx := ctxFor(t)
	if err := eng.CatchUpFromLog(ctx); err == nil {
		t.Fatal("catch-up over the bad event: want its failure")
	}
	if f := eng.ProcessFailure(); f == nil || f.Offset != evs[1].Offset {
		t.Fatalf("failure: %+v", f)
	}
	var parkedAt int64
	got, err := eng.SkipEvent(ctx, evs[1].Offset, func(_ context.Context, e foldstream.Event) error {
		parkedAt = e.Offset
		if cp, _ := cps.Get("skipper"); cp.ReducedThroughOffset >= e.Offset {
			t.Errorf("the checkpoint moved past the event (%d) before it was parked", cp.ReducedThroughOffset)
		}
		return nil
	})
	if err != nil || got.Offset != evs[1].Offset || parkedAt != evs[1].Offset {
		t.Fatalf("skip: %+v %v (parked %d)", got, err, parkedAt)
	}
	if cp, _ := cps.Get("skipper"); cp.ReducedThroughOffset != evs[1].Offset {
		t.Fatalf("checkpoint after the skip: %d, want %d", cp.ReducedThroughOffset, evs[1].Offset)
	}
	if f := eng.ProcessFailure(); f != nil {
		t.Fatalf("failure after the skip: %+v", f)
	}
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "state after the skip", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).State, nState{2})
	if _, err := eng.SkipEvent(ctx, evs[1].Offset, func(context.Context, foldstream.Event) error { return nil }); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("skip behind the cursor: %v, want CONFLICT", err)
	}
	mustDo(t, eng.Close(ctx))

	// A new engine on the checkpoint runs nothing again.
	ran = nil
	eng = newEngine[nState](t, p, mem, cps)
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "effects of the new engine", len(ran), 0)

	bad := must[foldtype.ReadPage](t)(mem.Read(ctx, evs[1].Offset-1, 1)).Events[0]
	err = eng.RedriveEvent(ctx, bad)
	if pe, ok := errors.AsType[*foldstream.ProcessEventError](err); !ok || pe.Offset != bad.Offset {
		t.Fatalf("redrive while broken: %v, want its ProcessEventError", err)
	}
	if f := eng.ProcessFailure(); f != nil {
		t.Fatalf("a failed redrive left the engine failing: %+v", f)
	}
	broken.Store(false)
	mustDo(t, eng.RedriveEvent(ctx, bad))
	eq(t, "effects of the redrive", ran, []int64{bad.Offset})
	snap := must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx))
	eq(t, "state after the redrive", snap.State, nState{3})
	eq(t, "cursor after the redrive", snap.Offset, evs[2].Offset)
	if cp, _ := cps.Get("skipper"); cp.ReducedThroughOffset != evs[2].Offset || string(cp.State) != `{"n":3}` {
		t.Fatalf("checkpoint after the redrive: %+v", cp)
	}
	later := appendT(t, mem, ev("e"))[0]
	if err := eng.RedriveEvent(ctx, later); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("redrive ahead of the cursor: %v, want CONFLICT", err)
	}
}
