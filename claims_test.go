package foldstream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// attempts is the Attempts fixture: each event starts a background attempt that ends only when the
// test ends it; the eventless pass traces "at-head".
type attempts struct {
	*fn[emptyState]
	trace rec[string]
	mu    sync.Mutex
	ends  map[int64]chan struct{}
}

func newAttempts(t *testing.T) *attempts {
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "attempts", Version: "1", Consumes: []string{"e"}}))
	a := &attempts{ends: map[int64]chan struct{}{}}
	a.fn = &fn[emptyState]{Base: foldstream.NewBase(c), process: func(args *foldstream.ProcessEventArgs[emptyState]) error {
		if args.Event == nil {
			a.trace.add("at-head")
			return nil
		}
		off := args.Event.Offset
		end := a.end(off)
		started := make(chan struct{})
		args.RunInBackground(func(context.Context) error {
			a.trace.add(fmt.Sprintf("attempt %d started", off))
			close(started)
			<-end
			return nil
		})
		<-started // keep the fixture's trace in event order
		return nil
	}}
	return a
}

func (a *attempts) end(off int64) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ends[off] == nil {
		a.ends[off] = make(chan struct{})
	}
	return a.ends[off]
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func setupAttempts(t *testing.T) (*attempts, *testsupport.MemoryStream, *foldstream.Engine[emptyState], *rec[string]) {
	a := newAttempts(t)
	mem := testsupport.NewMemoryStream()
	claimTrace := &rec[string]{}
	mem.SetClaimFunc(func(_ context.Context, at time.Time) error {
		if at.IsZero() {
			claimTrace.add("released")
		} else {
			claimTrace.add(fmt.Sprintf("claimed %d", at.Sub(testsupport.T).Milliseconds()))
		}
		return nil
	})
	eng := newEngine[emptyState](t, a, mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) {
		c.Clock = testsupport.NewFakeClock()
	})
	mem.Register(eng)
	return a, mem, eng, claimTrace
}

func TestP60_OneClaimWhileAttemptsAreInFlight(t *testing.T) {
	t.Parallel()
	a, mem, eng, claimTrace := setupAttempts(t)
	appendT(t, mem, ev("e"), ev("e"))
	waitUntil(t, "both attempts and the claim", func() bool { return len(a.trace.get()) == 2 && len(mem.Claims()) == 1 })
	// The claim is issued on its own goroutine, so its place among the attempts' traces is not
	// fixed in Go (upstream: between them); the claims themselves are exact.
	eq(t, "trace", a.trace.get(), []string{"attempt 1 started", "attempt 2 started"})
	eq(t, "claim trace", claimTrace.get(), []string{"claimed 20000"})
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second)})
	close(a.end(1))
	// Ending attempt 1 while attempt 2 is in flight leaves the claims unchanged (spec P-60).
	time.Sleep(30 * time.Millisecond)
	eq(t, "claims after ending attempt 1", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second)})
	close(a.end(2))
	drain(t, eng)
	eq(t, "claims", mem.Claims(), []time.Time{testsupport.T.Add(20 * time.Second), {}})
}

func TestP61_ReviveWhileBusyDoublesTheClaim(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 })
	settleExcept := func() { waitUntil(t, "pushes", func() bool { return eng.Pending() == 0 }) }
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

func TestP62_ClaimsAreSerialized(t *testing.T) {
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
	waitUntil(t, "the first claim", func() bool { return len(landed.get()) == 1 })
	close(a.end(1))
	<-releaseIssued
	appendT(t, mem, ev("e"))
	waitUntil(t, "the second attempt", func() bool { return len(a.trace.get()) == 2 })
	close(a.end(2))
	drain(t, eng)
	got := landed.get()
	eq(t, "landing order", got[:3], []string{"claim", "release", "claim"})
}

// §10.3: the busy re-claim doubles from 40 s and is capped at 30 minutes.
func TestReviveClaimIsCappedAtThirtyMinutes(t *testing.T) {
	t.Parallel()
	a, mem, eng, _ := setupAttempts(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 && eng.Pending() == 0 })
	for range 8 {
		mustDo(t, eng.Revive(ctx))
	}
	var got []time.Duration
	for _, c := range mem.Claims() {
		got = append(got, c.Sub(testsupport.T))
	}
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 320 * time.Second,
		640 * time.Second, 1280 * time.Second, foldstream.ReviveAfterMax, foldstream.ReviveAfterMax}
	eq(t, "claims", got, want)
	close(a.end(1))
	drain(t, eng)
}
