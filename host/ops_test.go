package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// An operator's retry runs a failing processor's next attempt at once, not at its backoff time:
// still broken, the attempt counts one more and arms the next retry from now; fixed, the processor
// recovers and processes what waited behind the event, with the clock never moved. A processor
// that is not failing, or not registered, is refused with a code.
func TestRetryNowRunsAFailingProcessorsNextAttemptAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "retry.db"), clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	p := newFlaky(t)
	if _, err := host.Register(ctx, h, "/f", p); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/f", newTicker(t, "ticker")); err != nil {
		t.Fatal(err)
	}
	if err := h.RetryNow(ctx, "/f", "flaky"); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("retry of a running processor: %v, want CONFLICT", err)
	}
	if err := h.RetryNow(ctx, "/f", "nobody"); !errors.Is(err, foldtype.ErrNotRegistered) {
		t.Fatalf("retry of an unknown processor: %v, want NOT_REGISTERED", err)
	}
	start := clk.Now()
	for _, typ := range []string{"tick", "bad", "tick"} {
		if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))

	// Still broken: the retry runs now and fails; the next one is armed twice the base from now.
	if err := h.RetryNow(ctx, "/f", "flaky"); err != nil {
		t.Fatalf("retry now: %v", err)
	}
	waitFor(t, func() bool { f := statusOf(t, h, "/f", "flaky").Failing; return f != nil && f.Attempts == 2 })
	clk.WaitArmed(t, start.Add(2*host.FailRetryBase))

	// Fixed: the retry runs now and the processor recovers, the clock still at start.
	p.broken.Store(false)
	if err := h.RetryNow(ctx, "/f", "flaky"); err != nil {
		t.Fatalf("retry now after the fix: %v", err)
	}
	waitFor(t, func() bool { return statusOf(t, h, "/f", "flaky").State == foldtype.StateRunning })
	if !clk.Now().Equal(start) {
		t.Fatalf("the clock moved: %v", clk.Now().Sub(start))
	}
	info, err := s.Events().HeadStream(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/f", "flaky", info.Tail, 5*time.Second); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	if snap, err := h.Snapshot(ctx, "/f", "flaky"); err != nil || state(t, snap.State).Ticks != 3 {
		t.Fatalf("after the retry: %v %v, want 3 events reduced", snap.State, err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
