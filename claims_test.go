package foldstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// Acceptance case P-60 (docs/engine.md#acceptance-cases).
func TestOneClaimWhileAttemptsAreInFlight(t *testing.T) {
	t.Parallel()
	a, mem, eng, claimTrace := setupAttempts(t)
	appendT(t, mem, ev("e"), ev("e"))
	waitUntil(t, "both attempts and the claim", func() bool { return len(a.trace.get()) == 2 && len(mem.Claims()) == 1 }, a.trace.changed, mem.Changed)
	// The claim is issued on its own goroutine, so its place among the attempts' traces is not
	// fixed (docs/engine.md#choices-and-their-reasons); the claims themselves are exact.
	eq(t, "trace", a.trace.get(), []string{"attempt 1 started", "attempt 2 started"})
	eq(t, "claim trace", claimTrace.get(), []string{"claimed 20000"})
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second)})
	// Ending attempt 1 while attempt 2 is in flight releases nothing: the one release comes after
	// attempt 2 ended, so the claims end exactly [claim, release] (P-60).
	close(a.end(1))
	close(a.end(2))
	drain(t, eng)
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second), {}})
}

// Acceptance case P-61 (docs/engine.md#acceptance-cases).
func TestReviveWhileBusyDoublesTheClaim(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 }, mem.Changed)
	settleExcept := func() { waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 }, eng.Changed) }
	settleExcept()
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second)})
	mustDo(t, eng.Revive(ctx))
	eq(t, "trace", a.trace.get(), []string{"attempt 1 started", "at-head"})
	eq(t, "claims", mem.Claims()[1:], []time.Time{testsupport.T.Add(40 * time.Second)})
	mustDo(t, eng.Revive(ctx))
	eq(t, "claims", mem.Claims()[2:], []time.Time{testsupport.T.Add(80 * time.Second)})
	close(a.end(1))
	drain(t, eng)
	cl := mem.Claims()
	eq(t, "released", cl[len(cl)-1], time.Time{})
	mustDo(t, eng.Revive(ctx))
	drain(t, eng)
	tr := a.trace.get()
	eq(t, "last trace", tr[len(tr)-1], "at-head")
	eq(t, "idle revive claims nothing", mem.Claims(), cl)
}

// Acceptance case P-62 (docs/engine.md#acceptance-cases).
func TestClaimsAreSerialized(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	landed := &rec[string]{}
	releaseIssued := make(chan struct{}, 1)
	mem.SetClaimFunc(func(_ context.Context, at time.Time) error {
		if at.IsZero() {
			releaseIssued <- struct{}{}
			time.Sleep(30 * time.Millisecond)
			landed.add("release")
		} else {
			landed.add("claim")
		}
		return nil
	})
	appendT(t, mem, ev("e"))
	waitUntil(t, "the first claim", func() bool { return len(landed.get()) == 1 }, landed.changed)
	close(a.end(1))
	<-releaseIssued
	appendT(t, mem, ev("e"))
	waitUntil(t, "the second attempt", func() bool { return len(a.trace.get()) == 2 }, a.trace.changed)
	close(a.end(2))
	drain(t, eng)
	got := landed.get()
	eq(t, "landing order", got[:3], []string{"claim", "release", "claim"})
}

// docs/engine.md#background-work-and-claims: the busy re-claim doubles from 40 s and is capped at
// 30 minutes.
func TestReviveClaimIsCappedAtThirtyMinutes(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 && eng.Pending() == 0 }, mem.Changed, eng.Changed)
	for range 8 {
		mustDo(t, eng.Revive(ctx))
	}
	var got []time.Duration
	for _, c := range mem.Claims() {
		got = append(got, c.Sub(testsupport.T))
	}
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 320 * time.Second,
		640 * time.Second, 1280 * time.Second, foldtype.ReviveAfterMax, foldtype.ReviveAfterMax}
	eq(t, "claims", got, want)
	close(a.end(1))
	drain(t, eng)
}

// docs/engine.md#background-work-and-claims: revive awaits the claim chain before returning, so
// the host derives its next alarm from the claim that actually landed. With a claim that takes 50
// ms to land, the doubled claim must already be recorded when Revive returns.
func TestReviveAwaitsItsClaim(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 }, mem.Changed)
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 }, eng.Changed)
	mem.SetClaimFunc(func(context.Context, time.Time) error { time.Sleep(50 * time.Millisecond); return nil })
	mustDo(t, eng.Revive(ctxFor(t)))
	eq(t, "claims when Revive returned", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second)})
	close(a.end(1))
	drain(t, eng)
}

// docs/engine.md#background-work-and-claims: when the last attempt settles, revivesWhileBusy is
// reset, so the next busy revive claims 40 s again (not 160 s, continuing the old doubling).
func TestBusyReviveCountResetsWhenIdle(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 && len(mem.Claims()) == 1 }, eng.Changed, mem.Changed)
	mustDo(t, eng.Revive(ctx))
	mustDo(t, eng.Revive(ctx))
	close(a.end(1))
	drain(t, eng)
	second := appendT(t, mem, ev("e"))[0].Offset
	waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 && len(mem.Claims()) == 5 }, eng.Changed, mem.Changed)
	mustDo(t, eng.Revive(ctx))
	eq(t, "claims", mem.Claims(), []time.Time{
		testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second), testsupport.T.Add(80 * time.Second), {},
		testsupport.T.Add(20 * time.Second), testsupport.T.Add(40 * time.Second)})
	close(a.end(second))
	drain(t, eng)
}

// docs/engine.md#background-work-and-claims: revive's eventless pass is followed by
// publishLiveState(), so a runtime field the at-head pass changed reaches the live state.
func TestReviveEventlessPassPublishes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	wakes := 0
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "waker", "1", "tick")), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				mu.Lock()
				wakes++
				mu.Unlock()
			}
			return nil
		},
		project: func(nState) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			return map[string]int{"wakes": wakes}, nil
		}}
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	mustDo(t, eng.Revive(ctxFor(t)))
	jsonEq(t, "live state", foldstream.JSON(eng.LiveState().Get()), `{"wakes":1}`)
}
