package foldstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// TestAnEngineThatMayNotWorkRunsNoProcessEventNoBlockerAndNoCheckpoint: MayWork is asked before
// each ProcessEvent and before each blocker; a refusal ends the range with MayWork's error, runs
// nothing more, writes no checkpoint and is no ProcessEvent failure; once MayWork allows it again
// the same events run.
func TestAnEngineThatMayNotWorkRunsNoProcessEventNoBlockerAndNoCheckpoint(t *testing.T) {
	t.Parallel()
	refused := errors.New("this node may not work")
	var mu sync.Mutex
	allow := 1 << 30 // how many more MayWork calls are allowed
	var processed, blocked []int64
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "eff", Version: "1", Consumes: []string{"*"},
	}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			return nil
		}
		off := a.Event.Offset
		mu.Lock()
		processed = append(processed, off)
		mu.Unlock()
		a.BlockProcessorWhile(func(context.Context) error {
			mu.Lock()
			blocked = append(blocked, off)
			mu.Unlock()
			return nil
		})
		return nil
	}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[emptyState](t, p, mem, cps, func(cfg *foldstream.EngineConfig) {
		cfg.MayWork = func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if allow == 0 {
				return refused
			}
			allow--
			return nil
		}
	})
	ctx := ctxFor(t)
	state := func() ([]int64, []int64, int64) {
		mu.Lock()
		defer mu.Unlock()
		cp, _ := cps.Get("eff")
		return append([]int64(nil), processed...), append([]int64(nil), blocked...), cp.ReducedThroughOffset
	}
	setAllow := func(n int) { mu.Lock(); allow = n; mu.Unlock() }

	appendT(t, mem, ev("x"), ev("x"))
	mustDo(t, eng.CatchUpFromLog(ctx))
	pr, bl, cur := state()
	eq(t, "allowed", []any{pr, bl, cur}, []any{[]int64{1, 2}, []int64{1, 2}, int64(2)})

	// Refused before ProcessEvent.
	appendT(t, mem, ev("x"))
	setAllow(0)
	if err := eng.CatchUpFromLog(ctx); !errors.Is(err, refused) {
		t.Fatalf("catch-up refused before ProcessEvent: %v, want MayWork's error", err)
	}
	pr, bl, cur = state()
	eq(t, "refused before ProcessEvent", []any{pr, bl, cur}, []any{[]int64{1, 2}, []int64{1, 2}, int64(2)})

	// Allowed into ProcessEvent, refused before its blocker.
	setAllow(1)
	if err := eng.CatchUpFromLog(ctx); !errors.Is(err, refused) {
		t.Fatalf("catch-up refused before the blocker: %v, want MayWork's error", err)
	}
	pr, bl, cur = state()
	eq(t, "refused before the blocker", []any{pr, bl, cur}, []any{[]int64{1, 2, 3}, []int64{1, 2}, int64(2)})
	if f := eng.ProcessFailure(); f != nil {
		t.Fatalf("a refusal counted as a ProcessEvent failure: %v", f)
	}

	// Allowed again: the event runs, its blocker too, and the checkpoint moves.
	setAllow(1 << 30)
	mustDo(t, eng.CatchUpFromLog(ctx))
	pr, bl, cur = state()
	eq(t, "allowed again", []any{pr, bl, cur}, []any{[]int64{1, 2, 3, 3}, []int64{1, 2, 3}, int64(3)})
}
