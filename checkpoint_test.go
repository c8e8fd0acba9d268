package foldstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

func TestUTF16Len(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"": 0, "abc": 3, "é": 1, "€": 1, "😀": 2, "a😀b": 4, "\xff": 1} {
		eq(t, s, foldtype.UTF16Len(s), want)
	}
}

type bigState struct {
	S string `json:"s"`
}

// The latch (docs/engine.md#the-latch): a not-retryable checkpoint refusal fails every later chain
// unit of this incarnation with the same error, without running it; a new incarnation tries again.
func TestLatchAfterCheckpointTooLarge(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[bigState]](t)(foldstream.DefineContract(foldstream.ContractConfig[bigState]{Slug: "hoarder", Version: "1"}))
	p := &fn[bigState]{Base: foldstream.NewBase(c), project: projectNull[bigState],
		reduce: func(a foldstream.ReduceArgs[bigState]) (bigState, bool, error) {
			return bigState{S: a.State.S + strings.Repeat("y", 1<<20)}, true, nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[bigState](t, p, mem, cps)
	ctx := ctxFor(t)
	appendT(t, mem, ev("e"), ev("e"), ev("e"))
	err := eng.CatchUpFromLog(ctx)
	if !errors.Is(err, foldtype.ErrReduceCheckpointTooLarge) {
		t.Fatalf("got %v", err)
	}
	reads := mem.Reads()
	for _, f := range []func() error{
		func() error { return eng.CatchUpFromLog(ctx) },
		func() error { return eng.ProcessEventBatch(ctx, nil, foldstream.ScannedRange{After: 3, Through: 4}) },
		func() error { return eng.Revive(ctx) },
	} {
		if err2 := f(); err2 != err {
			t.Errorf("latched unit: got %v, want the same error value", err2)
		}
	}
	eq(t, "no unit ran", mem.Reads(), reads)
	eq(t, "writes", cps.Writes(), 0)
	eng2 := newEngine[bigState](t, p, mem, cps)
	if err := eng2.CatchUpFromLog(ctx); !errors.Is(err, foldtype.ErrReduceCheckpointTooLarge) {
		t.Fatalf("new incarnation: got %v", err)
	}
	if mem.Reads() == reads {
		t.Error("the new incarnation did not try again")
	}
}

// A failing checkpoint write that is retryable fails the batch but does not latch.
func TestRetryableWriteFailureDoesNotLatch(t *testing.T) {
	t.Parallel()
	cps := &flakyCheckpoints{Checkpoints: testsupport.MemoryCheckpoints(), failures: 1}
	p, _ := newCount(t, "1")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[ticksState](t, p, mem, cps)
	appendT(t, mem, ev("tick"))
	ctx := ctxFor(t)
	if err := eng.CatchUpFromLog(ctx); err == nil || !strings.Contains(err.Error(), "disk busy") {
		t.Fatalf("got %v", err)
	}
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "snapshot", must[foldstream.Snapshot[ticksState]](t)(eng.Snapshot(ctx)), foldstream.Snapshot[ticksState]{Offset: 1, State: ticksState{1}})
}

type flakyCheckpoints struct {
	*testsupport.Checkpoints
	failures int
}

func (f *flakyCheckpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldstream.Checkpoint, changed bool) error {
	if f.failures > 0 {
		f.failures--
		return errors.New("disk busy")
	}
	return f.Checkpoints.WriteCheckpoint(ctx, slug, cp, changed)
}

// Acceptance case P-23 (docs/engine.md#acceptance-cases).
func TestCheckpointAcrossIncarnations(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t), mem, cps, fed)
	unsub := testsupport.PushedByARow(mem, eng, []string{"counted"})
	ctx := ctxFor(t)
	must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
	appendT(t, mem, ev("noise"), ev("counted"))
	settle(t, mem)
	eq(t, "writes", cps.Writes(), 1)
	cp, _ := cps.Get("ledger")
	eq(t, "checkpoint", []any{cp.ReducerVersion, cp.ReducedThroughOffset, string(cp.State)}, []any{"1", int64(2), `{"counted":[2]}`})
	unsub()
	got := appendT(t, mem, ev("counted"), ev("noise"), ev("counted"))
	eq(t, "offsets", []int64{got[0].Offset, got[2].Offset}, []int64{4, 6})
	eng2 := newEngine[ledgerState](t, newLedger(t), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng2, []string{"counted"})()
	reads := mem.Reads()
	for range 2 {
		eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng2.Snapshot(ctx)),
			foldstream.Snapshot[ledgerState]{Offset: 6, State: ledgerState{Counted: []int64{2, 4, 6}}})
	}
	eq(t, "reads", mem.Reads()-reads, 1)
	cp, _ = cps.Get("ledger")
	eq(t, "checkpoint", []any{cp.ReducerVersion, cp.ReducedThroughOffset, string(cp.State)}, []any{"1", int64(6), `{"counted":[2,4,6]}`})
}

// Acceptance case P-41 (docs/engine.md#acceptance-cases).
func TestEffectOnlyNeverReplaysAfterEviction(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, effects := newEffectOnly(t)
	eng := newEngine[emptyState](t, p, mem, cps)
	mem.Register(eng)
	for range 4 {
		appendT(t, mem, ev("x"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "effects", effects.get(), []int64{1, 2, 3, 4})
	cp, _ := cps.Get("eff")
	eq(t, "stored", []any{cp.ReducedThroughOffset, cp.State == nil}, []any{int64(4), true})
	p2, effects2 := newEffectOnly(t)
	eng2 := newEngine[emptyState](t, p2, mem, cps)
	mustDo(t, eng2.CatchUpFromLog(ctxFor(t)))
	eq(t, "new engine effects", effects2.get(), []int64(nil))
}

// Acceptance case P-42 (docs/engine.md#acceptance-cases).
func TestStateChangingProcessorNeverReplays(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, effects := newCount(t, "1.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	mem.Register(eng)
	for range 4 {
		appendT(t, mem, ev("tick"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "effects", effects.get(), []int64{1, 2, 3, 4})
	p2, effects2 := newCount(t, "1.0.0")
	eng2 := newEngine[ticksState](t, p2, mem, cps)
	mustDo(t, eng2.CatchUpFromLog(ctxFor(t)))
	eq(t, "new engine effects", effects2.get(), []int64(nil))
	eq(t, "state", must[foldstream.Snapshot[ticksState]](t)(eng2.Snapshot(ctxFor(t))).State, ticksState{4})
}

// docs/engine.md#checkpoints: the ceiling counts the characters (UTF-16 code units) of the state's
// JSON text written without HTML escapes. encoding/json's default escaping writes "<" as the six
// characters \u003c; a state of 500 000 "<" is ~500 000 characters and must not be refused (nor
// latched) as a 3-million-character state.
func TestCheckpointCeilingCountsJSONTextWithoutHTMLEscapes(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[bigState]](t)(foldstream.DefineContract(foldstream.ContractConfig[bigState]{Slug: "markup", Version: "1"}))
	p := &fn[bigState]{Base: foldstream.NewBase(c), project: projectNull[bigState],
		reduce: func(a foldstream.ReduceArgs[bigState]) (bigState, bool, error) {
			return bigState{S: strings.Repeat("<", 500000)}, true, nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[bigState](t, p, mem, cps)
	appendT(t, mem, ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "writes", cps.Writes(), 1)
	cp, ok := cps.Get("markup")
	if !ok {
		t.Fatal("no row")
	}
	if n := foldtype.UTF16Len(string(cp.State)); n != 500000+len(`{"s":""}`) {
		t.Errorf("stored state is %d chars, want the unescaped JSON length %d", n, 500000+len(`{"s":""}`))
	}
}

// docs/engine.md#loading-the-checkpoint: a row whose state column is NULL reads back as
// initialState() — the contract's initial state, not Go's zero value.
func TestNullCheckpointStateReadsAsTheInitialState(t *testing.T) {
	t.Parallel()
	cps := testsupport.MemoryCheckpoints()
	mustDo(t, cps.WriteCheckpoint(context.Background(), "tally", foldstream.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 4}, false))
	eng := newEngine[tally2State](t, newTally2(t, "1", 1), &stubStream{}, cps)
	eq(t, "snapshot", must[foldstream.Snapshot[tally2State]](t)(eng.Snapshot(ctxFor(t))),
		foldstream.Snapshot[tally2State]{Offset: 4, State: tally2State{Secret: "hidden"}})
}

// slowEffects makes processors whose effect (a blocker) of each event takes 400 ms on clk and is
// recorded, except the effect of event at, which runs instead (a node dying, a failing effect).
type slowEffects struct {
	c       *foldstream.Contract[emptyState]
	clk     *testsupport.FakeClock
	mu      sync.Mutex
	effects []int64
}

func newSlowEffects(t *testing.T) *slowEffects {
	return &slowEffects{clk: testsupport.NewFakeClock(), c: must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(
		foldstream.ContractConfig[emptyState]{Slug: "slow", Version: "1", Consumes: []string{"x"}}))}
}

func (s *slowEffects) processor(at int64, instead func(ctx context.Context) error) *fn[emptyState] {
	return &fn[emptyState]{Base: foldstream.NewBase(s.c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			return nil
		}
		off := a.Event.Offset
		a.BlockProcessorWhile(func(ctx context.Context) error {
			if off == at {
				return instead(ctx)
			}
			s.mu.Lock()
			s.effects = append(s.effects, off)
			s.mu.Unlock()
			s.clk.Advance(400 * time.Millisecond)
			return nil
		})
		return nil
	}}
}

// engine opens an engine of p on mem and cps with s's clock.
func (s *slowEffects) engine(t *testing.T, p *fn[emptyState], mem foldstream.Stream, cps foldstream.CheckpointStorage) *foldstream.Engine[emptyState] {
	return newEngine[emptyState](t, p, mem, cps, func(c *foldstream.EngineConfig) { c.Clock = s.clk })
}

// take returns the effects recorded so far and forgets them.
func (s *slowEffects) take() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.effects
	s.effects = nil
	return e
}

// A catch-up over a backlog of slow effects commits in parts: once a range has run for
// RangeCommitAfter, the events it processed so far are checkpointed before the next one runs, so
// an engine that dies in the middle of the range (its node killed) leaves its successor only the
// effects of the last part to run again, not the whole page's.
func TestLongCatchUpCheckpointsWhatItProcessedBeforeItsEnd(t *testing.T) {
	t.Parallel()
	mem, cps, slow := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints(), newSlowEffects(t)
	stuck, release := make(chan struct{}), make(chan struct{})
	dies := func(ctx context.Context) error {
		close(stuck)
		select { // the node dies here
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("the node died")
	}
	for range 10 {
		appendT(t, mem, ev("x"))
	}
	eng := slow.engine(t, slow.processor(8, dies), mem, cps)
	done := make(chan error, 1)
	go func() { done <- eng.CatchUpFromLog(ctxFor(t)) }()
	<-stuck
	// 400 ms per effect: the range committed after the third and the sixth event (1.2 s each).
	cp, ok := cps.Get("slow")
	eq(t, "checkpoint while the range runs", []any{ok, cp.ReducedThroughOffset}, []any{true, int64(6)})
	eq(t, "the engine's cursor", eng.ReducedThroughOffset(), int64(6))
	close(release)
	<-done // failed: the blocker of event 8 did not finish
	mustDo(t, eng.Close(ctxFor(t)))
	slow.take()
	next := slow.engine(t, slow.processor(-1, nil), mem, cps)
	mustDo(t, next.CatchUpFromLog(ctxFor(t)))
	eq(t, "effects the next engine runs", slow.take(), []int64{7, 8, 9, 10})
}

// A pushed batch is the stream's unit: however long its effects take, it commits once, whole, and
// a failure late in it persists nothing (engine rule 4), so the next engine runs all its effects
// again.
func TestPushedBatchOfSlowEffectsCommitsOnceWhole(t *testing.T) {
	t.Parallel()
	mem, cps, slow := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints(), newSlowEffects(t)
	failed := make(chan struct{})
	fails := func(context.Context) error {
		close(failed)
		return errors.New("the effect failed")
	}
	eng := slow.engine(t, slow.processor(8, fails), mem, cps)
	mem.Register(eng)
	batch := make([]foldstream.EventInput, 10)
	for i := range batch {
		batch[i] = ev("x")
	}
	appendT(t, mem, batch...) // one pushed batch of ten
	<-failed
	settle(t, mem)
	if cp, ok := cps.Get("slow"); ok {
		t.Fatalf("a failed pushed batch persisted a checkpoint at %d", cp.ReducedThroughOffset)
	}
	eq(t, "the engine's cursor", eng.ReducedThroughOffset(), int64(0))
	mustDo(t, eng.Close(ctxFor(t)))
	slow.take()
	next := slow.engine(t, slow.processor(-1, nil), mem, cps)
	mustDo(t, next.CatchUpFromLog(ctxFor(t)))
	eq(t, "effects the next engine runs", slow.take(), []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
}
