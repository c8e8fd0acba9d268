package foldstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// The engine's own writes through a database blip (docs/engine.md#writes-through-a-database-blip),
// on a fake clock: each test passes the pauses it expects between attempts as the engine arms
// them, so a wrong pause fails the test and half a minute of retries takes no time.

// refusals hands out the errors a fake store answers its next writes with, then lets them through.
type refusals struct {
	clock    *testsupport.FakeClock // set by the stand
	mu       sync.Mutex
	next     []error // answered in order, one per attempt
	always   error   // answered once next is used up (nil: the write goes through)
	attempts int
	at       []time.Time // when each attempt came
}

func (r *refusals) take() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	r.at = append(r.at, r.clock.Now())
	if len(r.next) > 0 {
		err := r.next[0]
		r.next = r.next[1:]
		return err
	}
	return r.always
}

func (r *refusals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// refusingStream refuses the appends of events of type refused as told, and passes everything else
// to the memory stream.
type refusingStream struct {
	*testsupport.MemoryStream
	refused string
	r       *refusals
}

func (s *refusingStream) Append(ctx context.Context, in ...foldtype.EventInput) ([]foldtype.Event, error) {
	for _, ev := range in {
		if ev.Type == s.refused {
			if err := s.r.take(); err != nil {
				return nil, err
			}
			break
		}
	}
	return s.MemoryStream.Append(ctx, in...)
}

// refusingCheckpoints keeps checkpoints in a map and refuses the writes as told.
type refusingCheckpoints struct {
	mu   sync.Mutex
	rows map[string]foldtype.Checkpoint
	r    *refusals
}

func (c *refusingCheckpoints) ReadCheckpoint(_ context.Context, slug string) (foldtype.Checkpoint, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.rows[slug]
	return cp, ok, nil
}

func (c *refusingCheckpoints) WriteCheckpoint(_ context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	if err := c.r.take(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !stateChanged {
		cp.State = c.rows[slug].State
	}
	c.rows[slug] = cp
	return nil
}

func (c *refusingCheckpoints) through(slug string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rows[slug].ReducedThroughOffset
}

var (
	errUnavailable = &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Message: "the database is unavailable; retry later"}
	errUnknown     = &foldtype.Error{Code: foldtype.CodeCommitOutcomeUnknown, Retryable: true, Message: "the database did not confirm the commit"}
	errLeaseLost   = &foldtype.Error{Code: foldtype.CodeLeaseLost, Message: "this node no longer holds its lease"}
)

// effector runs an external effect per "tick" in a blocker and emits an "effect" event for it,
// keyed (the emit's idempotency key) unless unkeyed.
type effector struct {
	mu      sync.Mutex
	effects map[int64]int // tick offset -> runs of its effect
}

func (f *effector) runs(off int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects[off]
}

func newEffector(t *testing.T, unkeyed bool) (*effector, *fn[emptyState]) {
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "effector", Version: "1", Consumes: []string{"tick"}, Emits: []string{"effect"}}))
	f := &effector{effects: map[int64]int{}}
	base := foldstream.NewBase(c)
	return f, &fn[emptyState]{Base: base, process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			return nil
		}
		ev := *a.Event
		a.BlockProcessorWhile(func(ctx context.Context) error {
			f.mu.Lock()
			f.effects[ev.Offset]++
			f.mu.Unlock()
			in := foldtype.EventInput{Type: "effect"}
			if !unkeyed {
				in.IdempotencyKey = base.IdempotencyKey("effect", &ev)
			}
			_, err := a.Append(ctx, in)
			return err
		})
		return nil
	}}
}

// retryStand is an engine over a memory stream with two ticks, its emits and checkpoints refused
// as the test tells.
type retryStand struct {
	clock *testsupport.FakeClock
	fx    *effector
	mem   *testsupport.MemoryStream
	emits *refusals
	cps   *refusingCheckpoints
	eng   *foldstream.Engine[emptyState]
}

func newRetryStand(t *testing.T, emits, cps *refusals, unkeyed bool, mod ...func(*foldstream.EngineConfig)) *retryStand {
	fx, p := newEffector(t, unkeyed)
	mem := testsupport.NewMemoryStream()
	appendT(t, mem, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "tick"}) // 1, 2
	clock := testsupport.NewFakeClock()
	emits.clock, cps.clock = clock, clock
	st := &retryStand{clock: clock, fx: fx, mem: mem, emits: emits, cps: &refusingCheckpoints{rows: map[string]foldtype.Checkpoint{}, r: cps}}
	mod = append([]func(*foldstream.EngineConfig){func(cfg *foldstream.EngineConfig) { cfg.Clock = clock }}, mod...)
	st.eng = newEngine[emptyState](t, p, &refusingStream{MemoryStream: mem, refused: "effect", r: emits}, st.cps, mod...)
	t.Cleanup(func() { _ = st.eng.Close(context.Background()) })
	return st
}

// catchUp runs the engine's catch-up and passes each of pauses on the clock once the engine armed
// it, in order, then returns the catch-up's answer. before runs before the pause of its index.
func (st *retryStand) catchUp(t *testing.T, pauses []time.Duration, before map[int]func()) error {
	t.Helper()
	return st.catchUpIn(ctxFor(t), t, pauses, before)
}

func (st *retryStand) catchUpIn(ctx context.Context, t *testing.T, pauses []time.Duration, before map[int]func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- st.eng.CatchUpFromLog(ctx) }()
	for i, p := range pauses {
		st.clock.WaitArmed(t, st.clock.Now().Add(p))
		if f := before[i]; f != nil {
			f()
		}
		st.clock.Advance(p)
	}
	return <-done
}

// pausesOf returns the first n pauses between attempts: 50 ms, doubling up to a second.
func pausesOf(n int) []time.Duration {
	var out []time.Duration
	for p := 50 * time.Millisecond; len(out) < n; p = min(2*p, time.Second) {
		out = append(out, p)
	}
	return out
}

// effects returns the effect events on the stream.
func (st *retryStand) effects(t *testing.T) int {
	t.Helper()
	page, err := st.mem.Read(context.Background(), 0, 100)
	mustDo(t, err)
	n := 0
	for _, ev := range page.Events {
		if ev.Type == "effect" {
			n++
		}
	}
	return n
}

func TestAnEmitTheDatabaseRefusedIsSentAgainAndItsEffectRunsOnce(t *testing.T) {
	t.Parallel()
	emits := &refusals{next: []error{errUnavailable, errUnavailable, errUnknown}}
	st := newRetryStand(t, emits, &refusals{}, false)
	mustDo(t, st.catchUp(t, pausesOf(3), nil))
	{
		if st.fx.runs(1) != 1 || st.fx.runs(2) != 1 {
			t.Fatalf("effects ran %d and %d times; want once each", st.fx.runs(1), st.fx.runs(2))
		}
		if got := st.effects(t); got != 2 {
			t.Fatalf("%d effect events on the stream; want 2", got)
		}
		if got := st.cps.through("effector"); got != 2 {
			t.Fatalf("checkpoint through %d; want 2", got)
		}
		if st.eng.ProcessFailure() != nil {
			t.Fatalf("a failure was recorded: %v", st.eng.ProcessFailure())
		}
		// 50 ms, then 100 ms, then 200 ms between the attempts of the first tick's emit.
		if got, want := emits.at[3].Sub(emits.at[0]), 350*time.Millisecond; got != want {
			t.Fatalf("the fourth attempt came %v after the first; want %v", got, want)
		}
	}
}

func TestACheckpointTheDatabaseRefusedIsSentAgainAndTheRangeDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	cps := &refusals{next: []error{errUnavailable, errUnknown, errUnavailable}}
	st := newRetryStand(t, &refusals{}, cps, false)
	mustDo(t, st.catchUp(t, pausesOf(3), nil))
	if st.fx.runs(1) != 1 || st.fx.runs(2) != 1 {
		t.Fatalf("effects ran %d and %d times; want once each", st.fx.runs(1), st.fx.runs(2))
	}
	if got := st.cps.through("effector"); got != 2 || cps.count() != 4 {
		t.Fatalf("checkpoint through %d after %d attempts; want 2 after 4", got, cps.count())
	}
}

// While an engine sends a write again its status says which, since when, how many attempts, the
// last refusal and when it gives up; once the write went through it says nothing.
func TestAnEngineSendingAWriteAgainSaysSoInItsStatusUntilItGoesThrough(t *testing.T) {
	t.Parallel()
	cps := &refusals{next: []error{errUnavailable, errUnknown, errUnavailable}}
	st := newRetryStand(t, &refusals{}, cps, false)
	began := st.clock.Now()
	codes := []foldtype.Code{foldtype.CodeUnavailable, foldtype.CodeCommitOutcomeUnknown, foldtype.CodeUnavailable}
	before := map[int]func(){}
	for i := range 3 {
		before[i] = func() {
			w := st.eng.Status().WaitingForStore
			if w == nil {
				t.Errorf("before pause %d: no write waiting in the status", i)
				return
			}
			if w.Write != "checkpoint" || w.Attempts != i+1 || w.Code != codes[i] || !w.Since.Equal(began) ||
				!w.GivesUpAt.Equal(began.Add(foldstream.DefaultWriteRetry)) {
				t.Errorf("before pause %d: %+v; want the checkpoint after %d attempts, last refused with %s, since %v",
					i, w, i+1, codes[i], began)
			}
		}
	}
	mustDo(t, st.catchUp(t, pausesOf(3), before))
	if w := st.eng.Status().WaitingForStore; w != nil {
		t.Fatalf("the write went through, and the status still says %+v", w)
	}
}

// Sending an emit whose commit is unknown again could store it twice unless every event of it is
// keyed: an unkeyed batch fails the range at once, as a refusal no retry fixes does.
func TestAWriteThatASecondAttemptCouldStoreTwiceOrThatNoRetryFixesIsNotSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unkeyed bool
	}{
		{"an unkeyed emit whose commit is unknown", errUnknown, true},
		{"an emit refused for a lost lease", errLeaseLost, false},
		{"an emit refused for a reason of its own", errors.New("disk on fire"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			emits := &refusals{next: []error{tc.err}}
			st := newRetryStand(t, emits, &refusals{}, tc.unkeyed)
			err := st.catchUp(t, nil, nil)
			if !errors.Is(err, tc.err) {
				t.Fatalf("CatchUpFromLog = %v; want %v", err, tc.err)
			}
			if emits.count() != 1 || st.cps.through("effector") != 0 {
				t.Fatalf("%d attempts, checkpoint through %d; want 1 attempt and no checkpoint", emits.count(), st.cps.through("effector"))
			}
		})
	}
}

// A database down for longer than WriteRetry fails the range with the store's error, having asked
// about once a second; a negative WriteRetry sends nothing again.
func TestAWriteStillRefusedAfterWriteRetryFailsTheRange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		retry    time.Duration
		attempts int
	}{
		// 0.05+0.1+0.2+0.4+0.8 s, then a second each while the next pause ends before 30 s.
		{"default", 0, 6 + 28},
		{"off", -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			emits := &refusals{always: errUnavailable}
			st := newRetryStand(t, emits, &refusals{}, false, func(cfg *foldstream.EngineConfig) { cfg.WriteRetry = tc.retry })
			err := st.catchUp(t, pausesOf(tc.attempts-1), nil)
			if foldtype.CodeOf(err) != foldtype.CodeUnavailable {
				t.Fatalf("CatchUpFromLog = %v; want UNAVAILABLE", err)
			}
			if emits.count() != tc.attempts {
				t.Fatalf("%d attempts; want %d", emits.count(), tc.attempts)
			}
			if last := emits.at[len(emits.at)-1].Sub(emits.at[0]); tc.retry == 0 && last+time.Second < foldstream.DefaultWriteRetry {
				t.Fatalf("the last attempt came %v after the first; want within a second of %v", last, foldstream.DefaultWriteRetry)
			}
		})
	}
}

// An engine whose checkpoints are not fenced asks MayWork before sending a checkpoint again, as
// before the first attempt: a node that lost its lease meanwhile stops retrying.
func TestAnUnfencedCheckpointIsSentAgainOnlyWhileMayWorkAllows(t *testing.T) {
	t.Parallel()
	cps := &refusals{always: errUnavailable}
	var mu sync.Mutex
	refuse := false
	st := newRetryStand(t, &refusals{}, cps, false, func(cfg *foldstream.EngineConfig) {
		cfg.MayWork = func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if refuse {
				return errLeaseLost
			}
			return nil
		}
	})
	// Two attempts sent again while MayWork allows; the lease is lost during the third pause.
	err := st.catchUp(t, pausesOf(3), map[int]func(){2: func() {
		mu.Lock()
		refuse = true
		mu.Unlock()
	}})
	if !errors.Is(err, errLeaseLost) {
		t.Fatalf("CatchUpFromLog = %v; want the lease lost", err)
	}
	if cps.count() != 3 {
		t.Fatalf("%d attempts; want 3 (none once MayWork refused)", cps.count())
	}
}

// An engine that closes while one of its writes waits to be sent again stops waiting at once, and
// records no failure for the unit it cut short: the write's error is both the store's refusal
// and the cancellation.
func TestAWriteBeingSentAgainStopsWhenItsEngineCloses(t *testing.T) {
	t.Parallel()
	emits := &refusals{always: errUnavailable}
	st := newRetryStand(t, emits, &refusals{}, false)
	clock := st.clock
	done := make(chan error, 1)
	go func() { done <- st.eng.CatchUpFromLog(ctxFor(t)) }()
	clock.WaitArmed(t, clock.Now().Add(50*time.Millisecond))
	mustDo(t, st.eng.Close(ctxFor(t))) // returns once the unit settled
	<-done
	if emits.count() != 1 {
		t.Fatalf("%d attempts; want 1", emits.count())
	}
	if f := st.eng.ProcessFailure(); f != nil {
		t.Fatalf("a failure was recorded for a unit its engine's closing cut short: %v", f)
	}
}

func TestAWriteNotSentAgainForItsCallerNamesTheStoresReasonAndTheCancellation(t *testing.T) {
	t.Parallel()
	clock := testsupport.NewFakeClock()
	w := foldstream.WriteRetryForTest(clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w(ctx, func() error { return errUnavailable }) }()
	clock.WaitArmed(t, clock.Now().Add(50*time.Millisecond))
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errUnavailable) {
		t.Fatalf("got %v; want the store's UNAVAILABLE and the cancellation", err)
	}
}
