package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// poison counts ticks and records the offset of every ProcessEvent that succeeded (its external
// effect); it fails on a "bad" event while broken is set.
type poison struct {
	foldstream.Base[countState]
	broken  atomic.Bool
	mu      sync.Mutex
	effects []int64
}

func newPoison(t testing.TB) *poison {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{
		Slug: "poison", Version: "1", Consumes: []string{"tick", "bad"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &poison{Base: foldstream.NewBase(c)}
	p.broken.Store(true)
	return p
}

func (p *poison) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1, Offsets: append(slices.Clone(a.State.Offsets), a.Event.Offset)}, true, nil
}

func (p *poison) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	if a.Event.Type == "bad" && p.broken.Load() {
		return errors.New("the payments API refused it")
	}
	p.mu.Lock()
	p.effects = append(p.effects, a.Event.Offset)
	p.mu.Unlock()
	return nil
}

func (p *poison) ran() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.effects)
}

func appendTypes(t testing.TB, s *stream.Store, path string, types ...string) []int64 {
	t.Helper()
	var out []int64
	for _, typ := range types {
		got, err := s.Events().Stream(path).Append(context.Background(), foldtype.EventInput{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got[0].Offset)
	}
	return out
}

func waitProcessed(t testing.TB, h *host.Host, s *stream.Store, path, slug string) {
	t.Helper()
	info, err := s.Events().HeadStream(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(context.Background(), path, slug, info.Tail, 5*time.Second); err != nil {
		t.Fatalf("wait for %s on %s through %d: %v", slug, path, info.Tail, err)
	}
}

// A skip parks the event a processor fails on, with its failure and who skipped it why, and moves
// the processor past it without its Reduce or ProcessEvent: the events behind it run, and a
// restart does not run it again. A redrive while the cause stands leaves it parked with one
// attempt more; after the fix it runs once, reduced at the state the processor has reached, and
// leaves the list. A discard drops another parked event without running it.
func TestSkipParksTheFailingEventAndRedriveRunsItOnceAfterTheFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	file := filepath.Join(t.TempDir(), "skip.db")
	s := openStore(t, file, clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	p := newPoison(t)
	if _, err := host.Register(ctx, h, "/orders", p); err != nil {
		t.Fatal(err)
	}
	offs := appendTypes(t, s, "/orders", "tick", "bad", "tick")
	bad := offs[1]
	waitFor(t, func() bool { return statusOf(t, h, "/orders", "poison").State == foldtype.StateFailing })

	if _, err := h.Redrive(ctx, "/orders", "poison", 0); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("redrive with nothing parked: got %v, want CONFLICT", err)
	}
	opCtx := foldtype.WithOperatorRequest(ctx, foldtype.OperatorRequest{Actor: "alice"})
	pe, err := h.Skip(opCtx, "/orders", "poison", "payments API down")
	if err != nil {
		t.Fatal(err)
	}
	if pe.Offset != bad || pe.Type != "bad" || pe.Code != string(foldtype.CodeProcessEventFailed) || pe.Attempts != 1 ||
		pe.By != "alice" || pe.Reason != "payments API down" || pe.Node == "" || pe.At.IsZero() {
		t.Fatalf("parked: %+v", pe)
	}
	later := appendTypes(t, s, "/orders", "tick")[0]
	waitProcessed(t, h, s, "/orders", "poison")
	if st := statusOf(t, h, "/orders", "poison"); st.State == foldtype.StateFailing {
		t.Fatalf("status after the skip: %+v, want running", st)
	}
	snap, err := h.Snapshot(ctx, "/orders", "poison")
	if err != nil {
		t.Fatal(err)
	}
	if got := state(t, snap.State); got.Ticks != 3 || slices.Contains(got.Offsets, bad) {
		t.Fatalf("state after the skip: %+v, want the 3 ticks and not the skipped event", got)
	}
	if _, err := h.Skip(opCtx, "/orders", "poison", ""); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("skip of a running processor: got %v, want CONFLICT", err)
	}
	// The events behind the skipped one ran once each; the skipped one never. (The tick before it
	// may have run twice: a failing range runs again whole, docs/engine.md R-05.)
	ranBefore := p.ran()
	if countOf(ranBefore, offs[2]) != 1 || countOf(ranBefore, later) != 1 || countOf(ranBefore, bad) != 0 || countOf(ranBefore, offs[0]) == 0 {
		t.Fatalf("effects after the skip: %v", ranBefore)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart runs nothing again: the checkpoint moved past the skipped event.
	h2, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Shutdown(ctx)
	if _, err := host.Register(ctx, h2, "/orders", p); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, h2, s, "/orders", "poison")
	if got := p.ran(); !slices.Equal(got, ranBefore) {
		t.Fatalf("effects after the restart: got %v, want %v (nothing run again)", got, ranBefore)
	}
	list, err := h2.ParkedEvents(ctx, "/orders", "poison")
	if err != nil || len(list) != 1 || list[0] != pe {
		t.Fatalf("parked after the restart: %+v %v, want %+v", list, err, pe)
	}

	// Redrive while the cause stands: parked still, one attempt more, the failure answered.
	if _, err := h2.Redrive(ctx, "/orders", "poison", 0); !errors.Is(err, foldtype.ErrProcessorFailing) {
		t.Fatalf("redrive while broken: got %v, want PROCESSOR_FAILING", err)
	}
	if list, _ := h2.ParkedEvents(ctx, "/orders", "poison"); len(list) != 1 || list[0].Attempts != 2 || list[0].By != "alice" {
		t.Fatalf("parked after a failed redrive: %+v, want 2 attempts, still alice's", list)
	}
	if st := statusOf(t, h2, "/orders", "poison"); st.State == foldtype.StateFailing {
		t.Fatalf("a failed redrive made the processor failing: %+v", st)
	}

	p.broken.Store(false) // the fix
	res, err := h2.Redrive(ctx, "/orders", "poison", bad)
	if err != nil || !slices.Equal(res.Redriven, []int64{bad}) {
		t.Fatalf("redrive: %+v %v", res, err)
	}
	if got := p.ran(); len(got) != len(ranBefore)+1 || got[len(got)-1] != bad {
		t.Fatalf("effects after the redrive: %v, want the bad event's once, last", got)
	}
	snap, err = h2.Snapshot(ctx, "/orders", "poison")
	if err != nil {
		t.Fatal(err)
	}
	if got := state(t, snap.State); got.Ticks != 4 || got.Offsets[len(got.Offsets)-1] != bad {
		t.Fatalf("state after the redrive: %+v, want it reduced last", got)
	}
	if list, _ := h2.ParkedEvents(ctx, "/orders", "poison"); len(list) != 0 {
		t.Fatalf("parked after the redrive: %+v, want none", list)
	}

	// Discard: parked, then dropped without running.
	p.broken.Store(true)
	bad2 := appendTypes(t, s, "/orders", "bad")[0]
	waitFor(t, func() bool { return statusOf(t, h2, "/orders", "poison").State == foldtype.StateFailing })
	if _, err := h2.Skip(opCtx, "/orders", "poison", "bad data"); err != nil {
		t.Fatal(err)
	}
	if err := h2.Discard(ctx, "/orders", "poison", bad2); err != nil {
		t.Fatal(err)
	}
	if err := h2.Discard(ctx, "/orders", "poison", bad2); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("discard again: got %v, want CONFLICT", err)
	}
	p.broken.Store(false)
	if _, err := h2.Redrive(ctx, "/orders", "poison", 0); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("redrive after the discard: got %v, want CONFLICT (nothing parked)", err)
	}
	if slices.Contains(p.ran(), bad2) {
		t.Fatalf("a discarded event ran: %v", p.ran())
	}
}

// The failure policy's SkipEvent parks the event after MaxAttempts failed attempts (by "policy",
// recorded in the audit), and the processor goes on with the events behind it.
func TestTheFailurePolicyCanSkipTheEventInsteadOfPausing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "policyskip.db"), clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx)
	p := newPoison(t)
	if _, err := host.Register(ctx, h, "/f", p, host.WithFailurePolicy(host.FailurePolicy{MaxAttempts: 2, Then: host.SkipEvent})); err != nil {
		t.Fatal(err)
	}
	offs := appendTypes(t, s, "/f", "tick", "bad", "tick")
	at := clk.Now().Add(host.FailRetryBase)
	clk.WaitArmed(t, at)
	clk.Advance(at.Sub(clk.Now()))
	// The policy's skip is audited once it is done.
	waitFor(t, func() bool {
		audit, err := h.Audit(ctx, "/f", "poison", 10)
		return err == nil && len(audit) == 1 && audit[0].Actor == "policy" && audit[0].Op == "skip" && audit[0].Outcome == "done"
	})
	list, _ := h.ParkedEvents(ctx, "/f", "poison")
	if pe := list[0]; pe.Offset != offs[1] || pe.By != "policy" || pe.Attempts != 2 || pe.Type != "bad" {
		t.Fatalf("parked by the policy: %+v", pe)
	}
	waitProcessed(t, h, s, "/f", "poison")
	// A failing range runs again whole (docs/engine.md, R-05): the tick before the bad event may
	// have run on each attempt. The bad event never ran; the tick behind it did.
	if got := p.ran(); slices.Contains(got, offs[1]) || !slices.Contains(got, offs[0]) || !slices.Contains(got, offs[2]) {
		t.Fatalf("effects: got %v, want both ticks and not the skipped event", got)
	}
	if st := statusOf(t, h, "/f", "poison"); st.State != foldtype.StateRunning && st.State != foldtype.StateIdle {
		t.Fatalf("status: %+v, want running", st)
	}
}

func countOf(s []int64, v int64) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
