package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// Register returns while the processor still catches up on a backlog; a snapshot waits at most
// MaxWait (on the store's clock) and then answers CATCHING_UP with the processor's offset, and
// answers normally once the catch-up is done.
func TestRegisterServesWhileCatchingUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	for range 3 {
		if _, err := s.Events().Stream("/lag").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil { // 1..3
			t.Fatal(err)
		}
	}
	h, err := host.New(s, host.Config{Logger: quietLog, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := &heldTicker{ticker: newTicker(t, "held"), entered: make(chan struct{}), release: make(chan struct{})}
	if _, err := host.Register(ctx, h, "/lag", p); err != nil { // returns with the first tick held
		t.Fatal(err)
	}
	<-p.entered
	read := make(chan error, 1)
	go func() {
		_, err := h.Snapshot(ctx, "/lag", "held")
		read <- err
	}()
	clk.WaitArmed(t, testT.Add(time.Second))
	clk.Advance(time.Second)
	err = <-read
	var fe *foldtype.Error
	if !errors.Is(err, host.ErrCatchingUp) || !errors.As(err, &fe) {
		t.Fatalf("snapshot while catching up: got %v, want CATCHING_UP", err)
	}
	if off, ok := fe.Data["offset"].(int64); !ok || off != 0 {
		t.Fatalf("CATCHING_UP offset: got %#v, want int64 0", fe.Data["offset"])
	}
	// WaitUntilProcessed's own timeout (on the same clock) ends its wait the same way.
	waited := make(chan error, 1)
	go func() { waited <- h.WaitUntilProcessed(ctx, "/lag", "held", 3, time.Millisecond) }()
	clk.WaitArmed(t, testT.Add(time.Second+time.Millisecond))
	clk.Advance(time.Millisecond)
	err = <-waited
	if !errors.Is(err, host.ErrCatchingUp) || !errors.Is(err, foldtype.ErrProcessTimeout) || !errors.As(err, &fe) || fe.Data["offset"] != int64(0) {
		t.Fatalf("wait while catching up: got %v, want CATCHING_UP at offset 0", err)
	}
	close(p.release)
	snap, err := h.Snapshot(ctx, "/lag", "held")
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, snap.State); st.Ticks != 3 {
		t.Fatalf("ticks after the catch-up: got %d, want 3", st.Ticks)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// endsAt is a caller's context whose deadline, on the fake clock, is at: from then on Err says
// DeadlineExceeded. Its Done stays open, so the read's own bound is what wakes the read, and the
// caller's deadline has passed by the time the read looks: a caller whose deadline fires just
// after the host's bound, the server's bound being as long as the host's by default.
type endsAt struct {
	context.Context
	clk *testsupport.FakeClock
	at  time.Time
}

func (c endsAt) Err() error {
	if !c.clk.Now().Before(c.at) {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// A snapshot that passed its bound (MaxWait) while the processor catches up answers CATCHING_UP
// with the processor's offset even when the caller's deadline fires just after the bound — never
// the bound's internal cause (which the server answered 500 INTERNAL, "host: read bound passed").
func TestASnapshotPastItsBoundAnswersCatchingUpWhenTheCallerEndsJustAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	for range 3 {
		if _, err := s.Events().Stream("/long").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := host.New(s, host.Config{Logger: quietLog, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := &heldTicker{ticker: newTicker(t, "held"), entered: make(chan struct{}), release: make(chan struct{})}
	if _, err := host.Register(ctx, h, "/long", p); err != nil { // returns with the first tick held
		t.Fatal(err)
	}
	<-p.entered
	for _, view := range []string{"snapshot", "live"} {
		caller := endsAt{Context: ctx, clk: clk, at: clk.Now().Add(time.Second + time.Millisecond)}
		read := make(chan error, 1)
		go func() {
			var err error
			if view == "snapshot" {
				_, err = h.Snapshot(caller, "/long", "held")
			} else {
				_, err = h.LiveSnapshot(caller, "/long", "held")
			}
			read <- err
		}()
		clk.WaitArmed(t, clk.Now().Add(time.Second))
		clk.Advance(time.Second + time.Millisecond) // the bound, then the caller's deadline
		err := <-read
		var fe *foldtype.Error
		if !errors.Is(err, host.ErrCatchingUp) || !errors.As(err, &fe) {
			t.Fatalf("%s past its bound, the caller ending just after: got %v, want CATCHING_UP", view, err)
		}
		if off, ok := fe.Data["offset"].(int64); !ok || off != 0 {
			t.Fatalf("%s: CATCHING_UP offset %#v, want int64 0", view, fe.Data["offset"])
		}
	}
	close(p.release)
	if _, err := h.Snapshot(ctx, "/long", "held"); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
