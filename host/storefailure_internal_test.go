package host

import (
	"context"
	"errors"
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
