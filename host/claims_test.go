package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// revivedRunner reports each Revive on a channel.
type revivedRunner struct {
	foldstream.Runner
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
	defer s.Close()
	// Left by the previous incarnation's background attempt: due in 20 s, no failure yet.
	if err := s.Claim(ctx, "/r", "t", testT.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, s)
	cps, err := s.Checkpoints(ctx, "/r")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := foldstream.NewEngine[countState](newTicker(t, "t"), foldstream.EngineConfig{
		Stream: s.Stream("/r").ForProcessor("t"), Checkpoints: cps, FedByPushes: true, Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
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
	defer s.Close()
	for _, path := range []string{"/carts/a", "/carts/b"} {
		if _, err := s.Append(ctx, path, item(1)); err != nil {
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
		if err := s.Claim(ctx, path, "carts", testT.Add(20*time.Minute)); err != nil {
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
