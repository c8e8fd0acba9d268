package host_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/testsupport"
)

// leaseFailsOnceDriver is the PostgreSQL driver whose next taking of a lease fails, as an
// unreachable database's does, once failNext is set.
type leaseFailsOnceDriver struct {
	*pgdriver.Driver
	failNext *atomic.Bool
	failed   chan struct{}
}

func (d leaseFailsOnceDriver) AcquireLease(ctx context.Context, key, holder, addr string, ttl time.Duration) (driver.Lease, bool, error) {
	if d.failNext.CompareAndSwap(true, false) {
		d.failed <- struct{}{}
		return driver.Lease{}, false, foldtype.NewError(foldtype.CodeUnavailable, nil, "stream: the database is unavailable")
	}
	return d.Driver.AcquireLease(ctx, key, holder, addr, ttl)
}

// A commit opens its pattern processor's engine; when that opening fails before it took the
// lease because the database could not be reached (restarting), it is opened again on the store's
// clock and processes the commit, with no later append to ask for it.
func TestAPatternEngineWhoseOpeningFailedForWantOfTheDatabaseOpensAgainAndProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	clock := testsupport.NewFakeClock()
	dd := leaseFailsOnceDriver{Driver: d, failNext: new(atomic.Bool), failed: make(chan struct{}, 1)}
	s, err := stream.OpenDriver(ctx, dd, stream.Config{Logger: quietLog, Clock: clock})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	defer s.Close(ctx)
	h := newHost(t, s)
	defer h.Shutdown(ctx)
	p := newTicker(t, "ticks")
	if err := host.RegisterPattern(ctx, h, "/t/*", p); err != nil {
		t.Fatal(err)
	}

	dd.failNext.Store(true) // the opening's lease: no node holds it, so no lease scan takes it over
	evs, err := s.Events().Stream("/t/a").Append(ctx, foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(1)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-dd.failed:
	case <-time.After(30 * time.Second):
		t.Fatal("the commit opened no engine")
	}
	// Time moves on the store's clock (each step past the longest backoff) until the effect ran,
	// bounded by a real deadline.
	deadline := time.After(30 * time.Second)
	for !slices.Contains(p.gotEffects(), evs[0].Offset) {
		clock.Advance(host.OpenRetryMax)
		select {
		case <-time.After(20 * time.Millisecond): // polling: the retry is armed just after the failure
		case <-deadline:
			t.Fatalf("effects %v, want the tick at %d (pending timers: %v)", p.gotEffects(), evs[0].Offset, clock.Pending())
		}
	}
}

// catchUpFailsOnce is a runner whose first catch-up from the log fails as an unreachable
// database's read does.
type catchUpFailsOnce struct {
	foldtype.Runner
	failed *atomic.Bool
}

func (r catchUpFailsOnce) CatchUpFromLog(ctx context.Context) error {
	if r.failed.CompareAndSwap(false, true) {
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "stream: the database is unavailable")
	}
	return r.Runner.CatchUpFromLog(ctx)
}

// An engine whose opening catch-up failed for want of the database catches up again on the
// store's clock and processes the events already in the log, with no later append to push it.
func TestAnEngineWhoseCatchUpFailedForWantOfTheDatabaseCatchesUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clock)
	defer s.Close(ctx)
	evs, err := s.Events().Stream("/c").Append(ctx,
		foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(1)}, foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(2)})
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, s)
	defer h.Shutdown(ctx)
	r := catchUpFailsOnce{Runner: pushedTicker(t, s, "/c", clock), failed: new(atomic.Bool)}
	if err := h.Add(ctx, "/c", r); err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Offset
	deadline := time.After(30 * time.Second)
	for r.ReducedThroughOffset() < last {
		clock.Advance(host.OpenRetryMax)
		select {
		case <-time.After(20 * time.Millisecond): // polling: the retry is armed after the failure
		case <-deadline:
			t.Fatalf("the engine reduced through %d, want %d (failed once: %v; pending timers: %v)",
				r.ReducedThroughOffset(), last, r.failed.Load(), clock.Pending())
		}
	}
}

// pushFailsOnce is a runner whose first push fails as an unreachable database's checkpoint
// write does.
type pushFailsOnce struct {
	foldtype.Runner
	failed *atomic.Bool
}

func (r pushFailsOnce) ProcessEventBatch(ctx context.Context, events []foldtype.Event, rg foldtype.ScannedRange) error {
	if len(events) > 0 && r.failed.CompareAndSwap(false, true) {
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "stream: the database is unavailable")
	}
	return r.Runner.ProcessEventBatch(ctx, events, rg)
}

// An engine whose push failed for want of the database catches up from the log on the store's
// clock, with no later push to repair the gap.
func TestAnEngineWhosePushFailedForWantOfTheDatabaseCatchesUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clock)
	defer s.Close(ctx)
	h := newHost(t, s)
	defer h.Shutdown(ctx)
	r := pushFailsOnce{Runner: pushedTicker(t, s, "/p", clock), failed: new(atomic.Bool)}
	if err := h.Add(ctx, "/p", r); err != nil {
		t.Fatal(err)
	}
	// The opening catch-up ends first, so only the push brings the event.
	if !wait.Every(10*time.Second, time.Millisecond, func() bool {
		st := h.ProcessorsOn(ctx, "/p")
		return len(st) == 1 && st[0].State == foldtype.StateRunning
	}) {
		t.Fatalf("the engine did not catch up: %+v", h.ProcessorsOn(ctx, "/p"))
	}
	evs, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(1)})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Offset
	deadline := time.After(30 * time.Second)
	for r.ReducedThroughOffset() < last {
		clock.Advance(host.OpenRetryMax)
		select {
		case <-time.After(20 * time.Millisecond): // polling: the retry is armed after the failure
		case <-deadline:
			t.Fatalf("the engine reduced through %d, want %d (failed once: %v; pending timers: %v)",
				r.ReducedThroughOffset(), last, r.failed.Load(), clock.Pending())
		}
	}
}
