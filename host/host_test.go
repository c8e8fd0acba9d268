package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// ---- fixtures -------------------------------------------------------------------------------

type countState struct {
	Ticks   int     `json:"ticks"`
	Offsets []int64 `json:"offsets,omitempty"`
}

// ticker counts "tick" events, records each offset in its state and its effects, and emits a
// "milestone" every third tick (idempotently).
type ticker struct {
	foldstream.Base[countState]
	mu      sync.Mutex
	effects []int64
}

func newTicker(t testing.TB, slug string) *ticker {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{
		Slug: slug, Version: "1", Consumes: []string{"tick"}, Emits: []string{"milestone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &ticker{Base: foldstream.NewBase(c)}
}

func (p *ticker) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1, Offsets: append(slices.Clone(a.State.Offsets), a.Event.Offset)}, true, nil
}

func (p *ticker) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	p.mu.Lock()
	p.effects = append(p.effects, a.Event.Offset)
	p.mu.Unlock()
	if n := a.State.Ticks; n%3 == 0 {
		a.BlockProcessorWhile(func(ctx context.Context) error {
			_, err := a.Append(ctx, foldstream.EventInput{Type: "milestone", Payload: foldstream.JSON(map[string]int{"at": n}),
				IdempotencyKey: p.IdempotencyKey(fmt.Sprintf("milestone-%d", n), nil)})
			return err
		})
	}
	return nil
}

func (p *ticker) gotEffects() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.effects)
}

func openStore(t testing.TB, path string, clk foldstream.Clock) *stream.Store {
	t.Helper()
	s, err := stream.Open(path, stream.Options{Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newHost(t testing.TB, s *stream.Store) *host.Host {
	t.Helper()
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func state(t testing.TB, raw json.RawMessage) countState {
	t.Helper()
	var st countState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("state %s: %v", raw, err)
	}
	return st
}

// ---- tests ----------------------------------------------------------------------------------

// Every snapshot straight after an append reflects it (read-your-writes, spec §8.2), with the
// engine fed by the store's subscription.
func TestSnapshotReadsYourWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close()
	h := newHost(t, s)
	p := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h, "/c", p); err != nil {
		t.Fatal(err)
	}
	var want []int64
	for i := range 30 {
		in := []foldstream.EventInput{{Type: "tick"}}
		if i%4 == 0 {
			in = append(in, foldstream.EventInput{Type: "noise"})
		}
		got, err := s.Append(ctx, "/c", in...)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, got[0].Offset)
		snap, err := h.Snapshot(ctx, "/c", "ticker")
		if err != nil {
			t.Fatal(err)
		}
		if st := state(t, snap.State); !slices.Equal(st.Offsets, want) {
			t.Fatalf("after append %d: got %v, want %v", i, st.Offsets, want)
		}
		if snap.Offset < got[len(got)-1].Offset {
			t.Fatalf("after append %d: snapshot offset %d below the append's %d", i, snap.Offset, got[len(got)-1].Offset)
		}
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The birth batch is at 1..2; milestones are emitted once each, idempotently.
	page, err := s.Read(ctx, "/c", 0, 1000, stream.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	milestones := 0
	for _, e := range page.Events {
		types = append(types, e.Type)
		if e.Type == "milestone" {
			milestones++
			if e.Source == nil || e.Source.Processor == nil || e.Source.Processor.Slug != "ticker" {
				t.Fatalf("milestone source: got %+v", e.Source)
			}
		}
	}
	if types[0] != foldstream.CreatedType || types[1] != foldstream.WokenType {
		t.Fatalf("first records: got %v, want the birth batch", types[:2])
	}
	if milestones != 10 {
		t.Fatalf("milestones: got %d, want 10", milestones)
	}
}

// A host reborn on the same file resumes every processor from its checkpoint: no effect runs
// again, events appended while it was down are processed once, and the new incarnation's wake
// record lands.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "h.db")
	s := openStore(t, file, nil)
	h := newHost(t, s)
	p1 := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h, "/c", p1); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.Append(ctx, "/c", foldstream.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Snapshot(ctx, "/c", "ticker"); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/c", foldstream.EventInput{Type: "tick"}); err != nil { // while no host runs
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, file, nil)
	defer s2.Close()
	h2 := newHost(t, s2)
	p2 := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h2, "/c", p2); err != nil {
		t.Fatal(err)
	}
	snap, err := h2.Snapshot(ctx, "/c", "ticker")
	if err != nil {
		t.Fatal(err)
	}
	st := state(t, snap.State)
	if st.Ticks != 5 {
		t.Fatalf("ticks after restart: got %d, want 5", st.Ticks)
	}
	if got, want := p2.gotEffects(), []int64{st.Offsets[4]}; !slices.Equal(got, want) {
		t.Fatalf("effects in the new incarnation: got %v, want only the new tick %v", got, want)
	}
	page, _ := s2.Read(ctx, "/c", 0, 1000, stream.ReadOptions{})
	woken := 0
	for _, e := range page.Events {
		if e.Type == foldstream.WokenType {
			woken++
		}
	}
	if woken != 2 {
		t.Fatalf("wake records: got %d, want 2 (one per incarnation)", woken)
	}
	if err := h2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// ---- claims and revive ----------------------------------------------------------------------

type attempts struct {
	foldstream.Base[struct{}]
	mu      sync.Mutex
	trace   []string
	release map[int64]chan struct{}
}

func newAttempts(t testing.TB) *attempts {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[struct{}]{Slug: "attempts", Version: "1", Consumes: []string{"e"}})
	if err != nil {
		t.Fatal(err)
	}
	return &attempts{Base: foldstream.NewBase(c), release: map[int64]chan struct{}{}}
}

func (p *attempts) add(s string) {
	p.mu.Lock()
	p.trace = append(p.trace, s)
	p.mu.Unlock()
}

func (p *attempts) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil {
		p.add("at-head")
		return nil
	}
	off := a.Event.Offset
	ch := make(chan struct{})
	p.mu.Lock()
	p.release[off] = ch
	p.mu.Unlock()
	a.RunInBackground(func(ctx context.Context) error {
		p.add(fmt.Sprintf("attempt %d started", off))
		<-ch
		return nil
	})
	return nil
}

func claimsOf(t testing.TB, s *stream.Store) []string {
	t.Helper()
	cs, err := s.Claims(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s +%s f%d", c.Path, c.Slug, c.At.Sub(testT), c.Failures))
	}
	return out
}

// A background attempt claims T+20s durably; the alarm revives the engine when the fake clock gets
// there; the busy engine re-claims 40 s later; ending the attempt releases the claim.
func TestAlarmRevivesClaimedProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close()
	h := newHost(t, s)
	p := newAttempts(t)
	eng, err := host.Register(ctx, h, "/a", p)
	if err != nil {
		t.Fatal(err)
	}
	// The registration's catch-up runs in the background; a read waits for it, so its at-head
	// pass comes before the append.
	if _, err := h.Snapshot(ctx, "/a", "attempts"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "e"}); err != nil { // offset 3
		t.Fatal(err)
	}
	clk.WaitArmed(t, testT.Add(20*time.Second))
	// Let the push's batch commit first, so the revive's catch-up finds nothing new and runs its
	// own eventless pass (a batch still in flight would be the at-head range instead).
	if err := h.WaitUntilProcessed(ctx, "/a", "attempts", 3, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := claimsOf(t, s), []string{"/a attempts +20s f0"}; !slices.Equal(got, want) {
		t.Fatalf("claims: got %v, want %v", got, want)
	}
	clk.Advance(20 * time.Second)
	// revive: catch-up (nothing new) → eventless at-head pass → busy → claim now+40s.
	clk.WaitArmed(t, testT.Add(60*time.Second))
	if got, want := claimsOf(t, s), []string{"/a attempts +1m0s f0"}; !slices.Equal(got, want) {
		t.Fatalf("claims after revive: got %v, want %v", got, want)
	}
	p.mu.Lock()
	trace := slices.Clone(p.trace)
	close(p.release[3])
	p.mu.Unlock()
	// The registration's catch-up read the birth batch (nothing consumed, at head): one at-head
	// pass; the revive's catch-up found nothing new, so revive ran one more.
	slices.Sort(trace)
	if want := []string{"at-head", "at-head", "attempt 3 started"}; !slices.Equal(trace, want) {
		t.Fatalf("trace (sorted): got %v, want %v", trace, want)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claimsOf(t, s); len(got) != 0 {
		t.Fatalf("claims after the attempt ended: got %v, want none", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingRunner wraps a runner whose Revive fails, to see the host re-claim with backoff.
type failingRunner struct {
	foldstream.Runner
	revives chan struct{}
}

func (f failingRunner) Revive(ctx context.Context) error {
	f.revives <- struct{}{}
	return errors.New("revive failed")
}

func TestFailedReviveReclaimsWithBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close()
	h := newHost(t, s)
	cps, err := s.Checkpoints(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := foldstream.NewEngine[countState](newTicker(t, "t"), foldstream.EngineConfig{
		Stream: s.Stream("/f").ForProcessor("t"), Checkpoints: cps, FedByPushes: true, Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	fr := failingRunner{Runner: eng, revives: make(chan struct{}, 4)}
	if err := h.Add(ctx, "/f", fr); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, "/f", "t", testT.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, testT.Add(time.Second))
	clk.Advance(time.Second)
	<-fr.revives
	clk.WaitArmed(t, testT.Add(21*time.Second))
	clk.Advance(20 * time.Second)
	<-fr.revives
	clk.WaitArmed(t, testT.Add(61*time.Second))
	if got, want := claimsOf(t, s), []string{"/f t +1m1s f2"}; !slices.Equal(got, want) {
		t.Fatalf("claims: got %v, want %v", got, want)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// ---- ephemerals through the real subscription (P-25 on the store) ---------------------------

type seenState struct {
	Seen []string `json:"seen"`
}

type seer struct{ foldstream.Base[seenState] }

func newSeer(t testing.TB, slug string, consumes ...string) *seer {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[seenState]{Slug: slug, Version: "1", Consumes: consumes})
	if err != nil {
		t.Fatal(err)
	}
	return &seer{Base: foldstream.NewBase(c)}
}

func (p *seer) Reduce(a foldstream.ReduceArgs[seenState]) (seenState, bool, error) {
	return seenState{Seen: append(slices.Clone(a.State.Seen), fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))}, true, nil
}

func (p *seer) ProjectLiveState(seenState) (any, error) { return nil, nil }

func TestP25EphemeralsOnTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close()
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/p", newSeer(t, "eph", "loud", "chunk")); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/p", newSeer(t, "star", "*")); err != nil {
		t.Fatal(err)
	}
	seen := func(slug string) []string {
		snap, err := h.Snapshot(ctx, "/p", slug)
		if err != nil {
			t.Fatal(err)
		}
		var st seenState
		json.Unmarshal(snap.State, &st)
		return st.Seen
	}
	s.Append(ctx, "/p", foldstream.EventInput{Type: "loud"})                                                                          // 3
	s.Append(ctx, "/p", foldstream.EventInput{Type: "chunk", Ephemeral: true}, foldstream.EventInput{Type: "chunk", Ephemeral: true}) // 4, 5
	if got, want := seen("eph"), []string{"loud@3", "chunk@4", "chunk@5"}; !slices.Equal(got, want) {
		t.Fatalf("eph: got %v, want %v", got, want)
	}
	if got, want := seen("star"), []string{"events.iterate.com/itx/created@1", "events.iterate.com/itx/woken@2", "loud@3"}; !slices.Equal(got, want) {
		t.Fatalf("star: got %v, want %v", got, want)
	}
	s.Append(ctx, "/p", foldstream.EventInput{Type: "loud"}) // 6
	if got := seen("star"); got[len(got)-1] != "loud@6" {
		t.Fatalf("star after loud: got %v", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownProcessorAndShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close()
	h := newHost(t, s)
	if _, err := h.Snapshot(ctx, "/x", "nope"); !errors.Is(err, host.ErrNotRegistered) || !errors.Is(err, foldstream.ErrNotRegistered) {
		t.Fatalf("unknown: got %v, want ErrNotRegistered", err)
	}
	if _, err := host.Register(ctx, h, "/x", newTicker(t, "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/x", newTicker(t, "t")); err == nil {
		t.Fatal("second registration of the same slug: got nil error")
	}
	if err := h.WaitUntilProcessed(ctx, "/x", "t", 2, time.Second); err != nil {
		t.Fatalf("wait for the birth batch: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/y", newTicker(t, "t")); !errors.Is(err, host.ErrShutdown) {
		t.Fatalf("register after shutdown: got %v, want ErrShutdown", err)
	}
}

// Shutdown delivers what the push chains still owe and waits for the engines: afterwards every
// processor's checkpoint covers every consumed event appended before it.
func TestShutdownDrainsPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close()
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/d", newSeer(t, "seen", "tick")); err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 50 {
		got, err := s.Append(ctx, "/d", foldstream.EventInput{Type: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		last = got[0].Offset
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cps, err := s.Checkpoints(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	cp, ok, err := cps.ReadCheckpoint(ctx, "seen")
	if err != nil || !ok {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	var st seenState
	if err := json.Unmarshal(cp.State, &st); err != nil {
		t.Fatal(err)
	}
	if cp.ReducedThroughOffset != last || len(st.Seen) != 50 {
		t.Fatalf("after shutdown: checkpoint at %d with %d events, want %d with 50", cp.ReducedThroughOffset, len(st.Seen), last)
	}
	if _, err := h.Snapshot(ctx, "/d", "seen"); !errors.Is(err, host.ErrShutdown) {
		t.Fatalf("snapshot after shutdown: got %v, want ErrShutdown", err)
	}
}

// heldTicker holds its first event's batch until released, so pushes pile up behind it.
type heldTicker struct {
	*ticker
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *heldTicker) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event != nil {
		p.once.Do(func() {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				close(p.entered)
				<-p.release
				return nil
			})
		})
	}
	return nil
}

// A push chain that overflows drops its oldest pending events; the engine heals the durable part
// from the log (gap repair), so no durable event is lost.
func TestOverflowHealsByGapRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close()
	h, err := host.New(s, host.Config{Logger: quietLog, MaxPendingEvents: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := &heldTicker{ticker: newTicker(t, "held"), entered: make(chan struct{}), release: make(chan struct{})}
	if _, err := host.Register(ctx, h, "/o", p); err != nil {
		t.Fatal(err)
	}
	var want []int64
	got, err := s.Append(ctx, "/o", foldstream.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, got[0].Offset)
	<-p.entered // the first push is held inside the engine
	for range 10 {
		got, err := s.Append(ctx, "/o", foldstream.EventInput{Type: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, got[0].Offset)
	}
	close(p.release)
	snap, err := h.Snapshot(ctx, "/o", "held")
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, snap.State); !slices.Equal(st.Offsets, want) {
		t.Fatalf("after overflow: got %v, want %v", st.Offsets, want)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
