package host

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/testsupport"
)

// flaky fails ProcessEvent with the error fail returns until it returns nil.
type flaky struct {
	foldstream.Base[fxState]
	mu   sync.Mutex
	fail error
	runs int
}

func (p *flaky) Reduce(a foldstream.ReduceArgs[fxState]) (fxState, bool, error) {
	return fxState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *flaky) ProcessEvent(a *foldstream.ProcessEventArgs[fxState]) error {
	if a.Event == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	return p.fail
}

func (p *flaky) set(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

// TestAProcessorFailingBecauseTheStoreWasOutOfReachRetriesWhenTheStoreSaysItMayBeBack: a
// processor whose ProcessEvent failed with UNAVAILABLE (its append could not reach the database)
// retries as soon as the store says anything may have changed (on PostgreSQL, the listener
// reconnected), not at its backoff, which the store's clock never reaches here. A processor
// failing for a reason of its own keeps its backoff.
func TestAProcessorFailingBecauseTheStoreWasOutOfReachRetriesWhenTheStoreSaysItMayBeBack(t *testing.T) {
	ctx := context.Background()
	s, h := sqliteHost(t, testsupport.NewFakeClock(), Config{}, nil)
	procs := map[string]*flaky{}
	for _, slug := range []string{"store", "own"} {
		c, err := foldstream.DefineContract(foldstream.ContractConfig[fxState]{Slug: slug, Version: "1", Consumes: []string{"tick"}})
		if err != nil {
			t.Fatal(err)
		}
		procs[slug] = &flaky{Base: foldstream.NewBase(c)}
		if _, err := Register(ctx, h, "/back", foldstream.Processor[fxState](procs[slug])); err != nil {
			t.Fatal(err)
		}
	}
	procs["store"].set(foldtype.NewError(foldtype.CodeUnavailable, nil, "append: the database does not answer"))
	procs["own"].set(errors.New("the processor's own failure"))
	if _, err := s.Events().Stream("/back").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	failing := func(slug string) *foldtype.ProcessorFailure {
		h.mu.Lock()
		defer h.mu.Unlock()
		if sl := h.slots[procKey{"/back", slug}]; sl != nil && sl.failing != nil {
			f := *sl.failing
			return &f
		}
		return nil
	}
	if !wait.For(10*time.Second, func() bool { return failing("store") != nil && failing("own") != nil }) {
		t.Fatal("the processors did not fail")
	}
	procs["store"].set(nil)
	procs["own"].set(nil)
	h.committed("") // what the store says when its listener reconnects
	if !wait.For(10*time.Second, func() bool { return failing("store") == nil }) {
		t.Fatalf("the processor that could not reach the store is still failing: %+v", failing("store"))
	}
	if f := failing("own"); f == nil || f.Attempts != 1 {
		t.Fatalf("the processor failing for its own reason: %+v, want it still failing, waiting for its backoff", f)
	}
}

// heldRetry fails ProcessEvent with fail while it is set; while hold is set, the event at holdAt waits
// for hold to close (entered is closed when it does), and every event it processes is recorded.
type heldRetry struct {
	foldstream.Base[fxState]
	mu      sync.Mutex
	fail    error
	holdAt  int64
	hold    chan struct{}
	entered chan struct{}
	seen    []int64
}

func (p *heldRetry) Reduce(a foldstream.ReduceArgs[fxState]) (fxState, bool, error) {
	return fxState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *heldRetry) ProcessEvent(a *foldstream.ProcessEventArgs[fxState]) error {
	if a.Event == nil {
		return nil
	}
	p.mu.Lock()
	if p.fail != nil {
		defer p.mu.Unlock()
		return p.fail
	}
	hold, entered := p.hold, p.entered
	if a.Event.Offset != p.holdAt {
		hold = nil
	}
	p.seen = append(p.seen, a.Event.Offset)
	p.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return nil
}

func (p *heldRetry) processed() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.seen...)
}

// TestAnEventPushedWhileTheRetryOfAFailingProcessorRanIsProcessedWithoutAnotherAppend: a push that
// comes while a failing processor's retry is catching up is held (the retry reads the log), and its
// event lies past what that catch-up read. Once the retry succeeded, that event still runs, with
// no later append or read on the stream to push it again.
func TestAnEventPushedWhileTheRetryOfAFailingProcessorRanIsProcessedWithoutAnotherAppend(t *testing.T) {
	ctx := context.Background()
	s, h := sqliteHost(t, testsupport.NewFakeClock(), Config{}, nil)
	c, err := foldstream.DefineContract(foldstream.ContractConfig[fxState]{Slug: "gated", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	p := &heldRetry{Base: foldstream.NewBase(c), fail: foldtype.NewError(foldtype.CodeUnavailable, nil, "append: the database does not answer")}
	if _, err := Register(ctx, h, "/held", foldstream.Processor[fxState](p)); err != nil {
		t.Fatal(err)
	}
	tick := func() int64 {
		t.Helper()
		evs, err := s.Events().Stream("/held").Append(ctx, foldtype.EventInput{Type: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Offset
	}
	slot := func() *slot {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.slots[procKey{"/held", "gated"}]
	}
	// Caught up before the first tick, so only its push runs it: the push records the failure
	// before it returns, and nothing runs the tick again but the retry below.
	if !wait.For(10*time.Second, func() bool { sl := slot(); return sl != nil && sl.caughtUp != nil }) {
		t.Fatal("the processor did not open")
	}
	<-slot().caughtUp
	first := tick()
	if !wait.For(10*time.Second, func() bool { sl := slot(); return sl != nil && sl.isFailing.Load() }) {
		t.Fatal("the processor did not fail")
	}
	p.mu.Lock()
	p.fail, p.holdAt, p.hold, p.entered = nil, first, make(chan struct{}), make(chan struct{})
	hold, entered := p.hold, p.entered
	p.mu.Unlock()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	t.Cleanup(release) // a failed check below must not leave the engine held for the host's close
	h.committed("")    // the store may be back: the retry runs now
	<-entered          // the retry's catch-up read the log and runs the failing event
	held := slot().heldPushes.Load()
	second := tick()
	if !wait.For(10*time.Second, func() bool { return slot().heldPushes.Load() > held }) {
		t.Fatal("the push of the second tick was not held while the processor was failing")
	}
	release()
	if !wait.For(10*time.Second, func() bool { return slices.Contains(p.processed(), second) }) {
		t.Fatalf("processed %v; the tick at %d, pushed while the retry ran, never ran", p.processed(), second)
	}
}

// TestFailuresBecauseTheStoreWasOutOfReachDoNotBringTheFailurePolicyCloser: a database that
// flaps makes a processor fail with UNAVAILABLE at every retry the store's recoveries bring
// forward; those attempts are the store's, so a failure policy of two attempts neither pauses the
// processor nor skips its event. Two failures of its own in a row then do.
func TestFailuresBecauseTheStoreWasOutOfReachDoNotBringTheFailurePolicyCloser(t *testing.T) {
	ctx := context.Background()
	clock := testsupport.NewFakeClock()
	s, h := sqliteHost(t, clock, Config{}, nil)
	c, err := foldstream.DefineContract(foldstream.ContractConfig[fxState]{Slug: "flaps", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	p := &flaky{Base: foldstream.NewBase(c)}
	p.set(foldtype.NewError(foldtype.CodeUnavailable, nil, "append: the database does not answer"))
	if _, err := Register(ctx, h, "/flaps", foldstream.Processor[fxState](p), WithFailurePolicy(FailurePolicy{MaxAttempts: 2})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/flaps").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	state := func() (attempts int, paused bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		sl := h.slots[procKey{"/flaps", "flaps"}]
		if sl == nil {
			return 0, false
		}
		if sl.failing != nil {
			attempts = sl.failing.Attempts
		}
		return attempts, sl.paused != nil
	}
	for want := 1; want <= 5; want++ {
		if !wait.For(10*time.Second, func() bool { n, _ := state(); return n == want }) {
			n, _ := state()
			t.Fatalf("%d failed attempts, want %d", n, want)
		}
		if _, paused := state(); paused {
			t.Fatalf("paused after %d attempts that failed because the store was out of reach", want)
		}
		h.committed("") // the store may be back: the retry runs now, and fails again
	}
	p.set(errors.New("the processor's own failure"))
	if !wait.For(10*time.Second, func() bool { n, _ := state(); return n == 6 }) {
		t.Fatal("the processor's own failure was not recorded")
	}
	if _, paused := state(); paused {
		t.Fatal("paused after one failure of the processor's own; the policy allows two")
	}
	clock.Advance(FailRetryMax) // the armed retry
	if !wait.For(10*time.Second, func() bool { _, paused := state(); return paused }) {
		n, _ := state()
		t.Fatalf("not paused after two failures of its own in a row (%d attempts in all)", n)
	}
}
