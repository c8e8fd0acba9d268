package host_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// revivedRunner reports each Revive on a channel.
// pushedTicker is a ticker engine "t" on path, fed by the host's pushes and timed by clk.
func pushedTicker(t *testing.T, s *stream.Store, path string, clk foldtype.Clock) foldtype.Runner {
	t.Helper()
	cps, err := s.Events().Checkpoints(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := foldstream.NewEngine[countState](newTicker(t, "t"), foldstream.EngineConfig{
		Stream: s.Events().Stream(path).ForProcessor("t"), Checkpoints: cps, FedByPushes: true, Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

type revivedRunner struct {
	foldtype.Runner
	revives chan struct{}
}

func (r revivedRunner) Revive(ctx context.Context) error {
	err := r.Runner.Revive(ctx)
	r.revives <- struct{}{}
	return err
}

// A claim a previous incarnation left (work that died with its process, never failed) is revived
// as soon as the processor is registered, not at its original due time.
func TestRestartRevivesLeftoverClaimsNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	// Left by the previous incarnation's background attempt: due in 20 s, no failure yet.
	if err := s.Events().Claim(ctx, "/r", "t", testT.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, s)
	eng := pushedTicker(t, s, "/r", clk)
	rr := revivedRunner{Runner: eng, revives: make(chan struct{}, 1)}
	if err := h.Add(ctx, "/r", rr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rr.revives: // without advancing the clock
	case <-time.After(10 * time.Second):
		t.Fatalf("the leftover claim was not revived at once; claims: %v", claimsOf(t, s))
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// The same for a pattern registration: leftover claims on every stream it covers are revived at
// once, opening their engines.
func TestPatternRevivesLeftoverClaimsNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	for _, path := range []string{"/carts/a", "/carts/b"} {
		if _, err := s.Events().Stream(path).Append(ctx, item(1)); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost(t, s)
	p := newCarts(t, "carts")
	a, b := p.expect("/carts/a", 1), p.expect("/carts/b", 1)
	if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
		t.Fatal(err)
	}
	<-a
	<-b
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/carts/a", "/carts/b"} {
		if err := s.Events().Claim(ctx, path, "carts", testT.Add(20*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	h2 := newHost(t, s)
	p2 := newCarts(t, "carts")
	p2.heads = make(chan struct{}, 2)
	if err := host.RegisterPattern(ctx, h2, "/carts/*", p2); err != nil {
		t.Fatal(err)
	}
	// Revived now, without advancing the clock: each revive opens the engine (at its checkpoint,
	// so its catch-up runs nothing) and runs the eventless at-head pass.
	for range 2 {
		select {
		case <-p2.heads:
		case <-time.After(10 * time.Second):
			t.Fatalf("leftover claims were not revived at once: %v", claimsOf(t, s))
		}
	}
	if err := h2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

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
	cs, err := s.Events().Claims(context.Background())
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
	defer s.Close(context.Background())
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
	if _, err := s.Events().Stream("/a").Append(ctx, foldtype.EventInput{Type: "e"}); err != nil { // offset 3
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
	foldtype.Runner
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
	defer s.Close(context.Background())
	h := newHost(t, s)
	eng := pushedTicker(t, s, "/f", clk)
	fr := failingRunner{Runner: eng, revives: make(chan struct{}, 4)}
	if err := h.Add(ctx, "/f", fr); err != nil {
		t.Fatal(err)
	}
	if err := s.Events().Claim(ctx, "/f", "t", testT.Add(time.Second)); err != nil {
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
