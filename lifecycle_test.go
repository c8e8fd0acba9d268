package foldstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// backgroundUntilCancelled is a processor whose every event starts one background attempt that
// runs until its context ends; started receives once per attempt, ended the attempt's ctx error.
func backgroundUntilCancelled(t *testing.T, started chan<- struct{}, ended chan<- error) *fn[nState] {
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, "bg", "1", tickType)), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				a.RunInBackground(func(ctx context.Context) error {
					started <- struct{}{}
					<-ctx.Done()
					ended <- ctx.Err()
					return ctx.Err()
				})
			}
			return nil
		}}
}

func TestCloseCancelsBackgroundAttemptsAndWaitsForThem(t *testing.T) {
	t.Parallel()
	mem, clk := testsupport.NewMemoryStream(), testsupport.NewFakeClock()
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	eng := newEngine[nState](t, backgroundUntilCancelled(t, started, ended), mem, testsupport.MemoryCheckpoints(),
		func(c *foldstream.EngineConfig) { c.Clock = clk })
	ctx := ctxFor(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctx))
	<-started
	mustDo(t, eng.Close(ctx))
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("background ctx ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("Close returned before the background attempt ended")
	}
	// The claim stays: the attempt Close cancelled is revived by the next incarnation.
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(foldtype.ReviveAfter)})
}

func TestCloseCancelsTheRunningUnitAndCommitsNothing(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	blocked := make(chan struct{})
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "blocker", "1", tickType)), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				close(blocked)
				<-ctx.Done()
				return ctx.Err()
			})
			return nil
		}}
	eng := newEngine[nState](t, p, mem, cps)
	ctx := ctxFor(t)
	appendT(t, mem, ev(tickType))
	result := make(chan error, 1)
	go func() { result <- eng.CatchUpFromLog(ctx) }()
	<-blocked
	mustDo(t, eng.Close(ctx))
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("catch-up: got %v, want the blocker's context.Canceled", err)
	}
	eq(t, "checkpoint writes", cps.Writes(), 0)
}

func TestCallsAfterCloseFailWithClosed(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, &fn[nState]{Base: foldstream.NewBase(nContract(t, "closed", "1", tickType)), reduce: incN},
		mem, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	evs := appendT(t, mem, ev(tickType))
	mustDo(t, eng.Close(ctx))
	mustDo(t, eng.Close(ctx)) // idempotent
	_, snapErr := eng.Snapshot(ctx)
	_, liveErr := eng.LiveSnapshot(ctx)
	for name, err := range map[string]error{
		"ProcessEventBatch":  eng.ProcessEventBatch(ctx, evs, foldstream.ScannedRange{After: 0, Through: 1}),
		"CatchUpFromLog":     eng.CatchUpFromLog(ctx),
		"Revive":             eng.Revive(ctx),
		"WaitUntilProcessed": eng.WaitUntilProcessed(ctx, 1, time.Second),
		"Snapshot":           snapErr,
		"LiveSnapshot":       liveErr,
	} {
		if !errors.Is(err, foldtype.ErrClosed) {
			t.Errorf("%s after Close: got %v, want code CLOSED", name, err)
		}
	}
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(0))
}

func TestCloseReleasesWaitersWithClosed(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, &fn[nState]{Base: foldstream.NewBase(nContract(t, "waited", "1", tickType)), reduce: incN},
		mem, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	result := make(chan error, 1)
	go func() { result <- eng.WaitUntilProcessed(ctx, 5, time.Hour) }()
	mustDo(t, eng.Close(ctx))
	if err := <-result; !errors.Is(err, foldtype.ErrClosed) {
		t.Fatalf("waiter: got %v, want code CLOSED", err)
	}
}

func TestEmittedIdempotencyKeysLiveInTheProcessorNamespace(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "echoer", Version: "1", Consumes: []string{"ping"}, Emits: []string{"echoed"}}))
	attempts := 0
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			return nil
		}
		a.BlockProcessorWhile(func(ctx context.Context) error {
			if _, err := a.Append(ctx, foldstream.EventInput{Type: "echoed", IdempotencyKey: c.IdempotencyKey("echo", a.Event)}); err != nil {
				return err
			}
			if attempts++; attempts == 1 {
				return errors.New("first attempt fails after emitting")
			}
			return nil
		})
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	appendT(t, mem, ev("ping"))
	if err := eng.CatchUpFromLog(ctx); err == nil {
		t.Fatal("first catch-up: want the blocker's failure")
	}
	mustDo(t, eng.CatchUpFromLog(ctx)) // the retried batch emits the same key again
	echoed := mem.EventsOfType("echoed")
	if len(echoed) != 1 {
		t.Fatalf("echoed %d times, want once (the retry dedupes)", len(echoed))
	}
	eq(t, "stored key", echoed[0].IdempotencyKey, foldtype.ProcessorKeyPrefix+"echoer/echo@1")
}

func TestWaitUntilProcessedTimesOutOnTheEngineClock(t *testing.T) {
	t.Parallel()
	mem, clk := testsupport.NewMemoryStream(), testsupport.NewFakeClock()
	eng := newEngine[nState](t, &fn[nState]{Base: foldstream.NewBase(nContract(t, "timed", "1", tickType)), reduce: incN},
		mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) { c.Clock = clk })
	ctx := ctxFor(t)
	result := make(chan error, 1)
	go func() { result <- eng.WaitUntilProcessed(ctx, 5, 10*time.Second) }()
	clk.WaitArmed(t, testsupport.T.Add(10*time.Second))
	clk.Advance(10 * time.Second)
	if err := <-result; !errors.Is(err, foldtype.ErrProcessTimeout) {
		t.Fatalf("got %v, want PROCESS_TIMEOUT", err)
	}
}
