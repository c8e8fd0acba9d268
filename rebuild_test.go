// The rebuild of a processor's next version beside the running one
// (docs/operations.md#rebuild-beside-the-running-version).
package foldstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// newStep is processor "steps" at version: each "e" event adds by to its state and records its
// effect as "v<version> <offset>".
func newStep(t *testing.T, version string, by int, effects *rec[string]) *fn[nState] {
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, "steps", version, "e")), project: projectNull[nState],
		reduce: func(a foldstream.ReduceArgs[nState]) (nState, bool, error) {
			return nState{N: a.State.N + by}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				effects.add(fmt.Sprintf("v%s %d", version, a.Event.Offset))
			}
			return nil
		}}
}

// effectOffsets splits recorded effects by version: offset → how many times it ran, per version.
func effectOffsets(t *testing.T, effects []string) map[string]map[int64]int {
	t.Helper()
	out := map[string]map[int64]int{}
	for _, e := range effects {
		var v string
		var off int64
		if _, err := fmt.Sscanf(e, "%s %d", &v, &off); err != nil {
			t.Fatalf("effect %q: %v", e, err)
		}
		if out[v] == nil {
			out[v] = map[int64]int{}
		}
		out[v][off]++
	}
	return out
}

func TestRebuildBesideTheRunningVersionUnderAWriterRunsEveryEffectOnceAcrossTheSwitch(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	effects := &rec[string]{}
	v1 := newEngine[nState](t, newStep(t, "1", 1, effects), mem, cps, fed)
	unregV1 := mem.Register(v1)
	for range 700 { // the rebuild has more than a page to fold
		appendT(t, mem, ev("e"))
	}
	mustDo(t, v1.CatchUpFromLog(ctx))

	const written = 400
	var wg sync.WaitGroup
	wg.Add(2)
	writing, reading := make(chan struct{}), make(chan struct{})
	go func() { // the writer: appends throughout the rebuild and the switch
		defer wg.Done()
		defer close(writing)
		for range written {
			if _, err := mem.Append(ctx, ev("e")); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	readErrs := 0
	go func() { // a reader of the running version: it answers throughout
		defer wg.Done()
		defer close(reading)
		for {
			select {
			case <-writing:
				return
			default:
			}
			if _, err := v1.Snapshot(ctx); err != nil && !errors.Is(err, foldtype.ErrClosed) {
				readErrs++
			}
		}
	}()

	rb := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects),
		foldstream.EngineConfig{Stream: mem, Checkpoints: cps, Reporter: &siteLog{}}))
	if _, err := rb.Snapshot(); !errors.Is(err, foldtype.ErrCatchingUp) {
		t.Fatalf("a read of the rebuilt version before the switch: got %v, want CATCHING_UP", err)
	}
	mustDo(t, rb.CatchUp(ctx))
	at := must[int64](t)(rb.Switch(ctx, v1))
	unregV1()
	v2 := newEngine[nState](t, newStep(t, "2", 2, effects), mem, cps, fed)
	mem.Register(v2)
	<-writing
	wg.Wait()
	settle(t, mem)
	mustDo(t, v2.CatchUpFromLog(ctx))
	drain(t, v1)
	drain(t, v2)

	if readErrs > 0 {
		t.Errorf("reads of the running version failed %d times during the rebuild", readErrs)
	}
	head := mem.Head()
	byVersion := effectOffsets(t, effects.get())
	for off := int64(1); off <= head; off++ {
		n1, n2 := byVersion["v1"][off], byVersion["v2"][off]
		switch {
		case off <= at && (n1 != 1 || n2 != 0):
			t.Fatalf("offset %d, before the switch at %d: v1 ran its effect %d times, v2 %d; want v1 once", off, at, n1, n2)
		case off > at && (n1 != 0 || n2 != 1):
			t.Fatalf("offset %d, after the switch at %d: v1 ran its effect %d times, v2 %d; want v2 once", off, at, n1, n2)
		}
	}
	snap := must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx))
	eq(t, "v2's state (the fold of the log at 2 per event)", snap, foldstream.Snapshot[nState]{Offset: head, State: nState{N: 2 * int(head)}})
	if _, ok := cps.Get(foldstream.RebuildRow("steps", "2")); ok {
		t.Error("the side row is still there after the switch")
	}
	if head != 700+written {
		t.Errorf("head %d, want %d", head, 700+written)
	}
}

func TestRebuildResumesFromItsSideRowAfterACrashBeforeTheSwitch(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	effects := &rec[string]{}
	v1 := newEngine[nState](t, newStep(t, "1", 1, effects), mem, cps, fed)
	mem.Register(v1)
	for range 600 {
		appendT(t, mem, ev("e"))
	}
	settle(t, mem)
	cfg := foldstream.EngineConfig{Stream: mem, Checkpoints: cps, Reporter: &siteLog{}}
	rb := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects), cfg))
	mustDo(t, rb.CatchUp(ctx))
	side, ok := cps.Get(foldstream.RebuildRow("steps", "2"))
	if !ok || side.ReducedThroughOffset != 600 {
		t.Fatalf("side row: got %+v %v, want it at 600", side, ok)
	}
	// The crash: the rebuild is gone; the running version goes on, its row untouched.
	appendT(t, mem, ev("e"))
	settle(t, mem)
	if cp, _ := cps.Get("steps"); cp.ReducerVersion != "1" || cp.ReducedThroughOffset != 601 {
		t.Fatalf("processor row: got %+v, want version 1 at 601", cp)
	}
	again := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects), cfg))
	eq(t, "resumed status", again.Status(), foldtype.ProcessorRebuild{Version: "2", Offset: 600})
	at := must[int64](t)(again.Switch(ctx, v1))
	eq(t, "switched at", at, int64(601))
	eq(t, "v2 row", must[foldstream.Snapshot[nState]](t)(again.Snapshot()), foldstream.Snapshot[nState]{Offset: 601, State: nState{N: 1202}})
	if n := len(effectOffsets(t, effects.get())["v2"]); n != 0 {
		t.Errorf("the rebuild ran %d effects, want none", n)
	}
}

// failingSwitch is a checkpoint storage whose switch write fails, as a crash before it would.
type failingSwitch struct{ *testsupport.Checkpoints }

func (failingSwitch) SwitchCheckpoint(context.Context, string, foldtype.Checkpoint, string) error {
	return errors.New("the database went away")
}

func TestAFailedSwitchWriteLeavesTheRunningVersionRunning(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	effects := &rec[string]{}
	v1 := newEngine[nState](t, newStep(t, "1", 1, effects), mem, cps, fed)
	mem.Register(v1)
	appendT(t, mem, ev("e"), ev("e"))
	settle(t, mem)
	rb := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects),
		foldstream.EngineConfig{Stream: mem, Checkpoints: failingSwitch{cps}, Reporter: &siteLog{}}))
	if _, err := rb.Switch(ctx, v1); err == nil {
		t.Fatal("switch with a failing write: got nil, want its error")
	}
	if rb.Switched() {
		t.Fatal("the rebuild reports switched after a failed write")
	}
	appendT(t, mem, ev("e"))
	settle(t, mem)
	eq(t, "v1 goes on", must[foldstream.Snapshot[nState]](t)(v1.Snapshot(ctx)), foldstream.Snapshot[nState]{Offset: 3, State: nState{N: 3}})
	eq(t, "v1 effects", len(effectOffsets(t, effects.get())["v1"]), 3)
	if cp, _ := cps.Get("steps"); cp.ReducerVersion != "1" {
		t.Errorf("processor row version %q after a failed switch, want 1", cp.ReducerVersion)
	}
}

func TestASwitchAfterItsWriteIsFoundSwitchedByTheNextRebuild(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	effects := &rec[string]{}
	v1 := newEngine[nState](t, newStep(t, "1", 1, effects), mem, cps, fed)
	mem.Register(v1)
	appendT(t, mem, ev("e"), ev("e"))
	settle(t, mem)
	cfg := foldstream.EngineConfig{Stream: mem, Checkpoints: cps, Reporter: &siteLog{}}
	rb := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects), cfg))
	eq(t, "switched at", must[int64](t)(rb.Switch(ctx, v1)), int64(2))
	// The crash after the write: a restart finds the switch done and runs the next version.
	again := must[*foldstream.Rebuild[nState]](t)(foldstream.NewRebuild[nState](newStep(t, "2", 2, effects), cfg))
	eq(t, "status after restart", again.Status(), foldtype.ProcessorRebuild{Version: "2", Offset: 2, Switched: true})
	v2 := newEngine[nState](t, newStep(t, "2", 2, effects), mem, cps, fed)
	appendT(t, mem, ev("e"))
	mustDo(t, v2.CatchUpFromLog(ctx))
	eq(t, "v2", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)), foldstream.Snapshot[nState]{Offset: 3, State: nState{N: 6}})
	eq(t, "effects", effects.get(), []string{"v1 1", "v1 2", "v2 3"})
	// The stopped running version processes nothing more and refuses a replay.
	if _, err := v1.Replay(ctx, foldtype.ReplayRequest{}); !errors.Is(err, foldtype.ErrClosed) {
		t.Errorf("replay of the switched-from engine: got %v, want CLOSED", err)
	}
}
