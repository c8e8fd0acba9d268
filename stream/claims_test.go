package stream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

func TestClaimsStoredAndReleased(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	es := s.Events().Stream("/a").ForProcessor("p")
	if err := es.Claim(ctx, testT.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := es.Claim(ctx, testT.Add(40*time.Second)); err != nil { // replaces
		t.Fatal(err)
	}
	got, err := s.Events().Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Path != "/a" || got[0].Slug != "p" || !got[0].At.Equal(testT.Add(40*time.Second)) {
		t.Fatalf("claims: got %+v", got)
	}
	if err := es.Claim(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Events().Claims(ctx); len(got) != 0 {
		t.Fatalf("after release: got %+v", got)
	}
	if err := s.Events().Stream("/a").Claim(ctx, testT); err == nil {
		t.Fatal("claim on an unbound view: got nil error")
	}
	if n := len(storedMessages(t, s)); n != 0 {
		t.Fatalf("claims wrote %d log rows, want 0", n)
	}
}

// The alarm loop spends a due claim and calls the handler exactly when the fake clock reaches it;
// a failing handler re-claims with backoff 20 s · 2^failures.
func TestAlarmsReviveAndBackOff(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	calls := make(chan DueClaim, 10)
	var fail atomic.Bool
	fail.Store(true)
	if err := s.Events().StartAlarms(func(ctx context.Context, c DueClaim) error {
		calls <- c
		if fail.Load() {
			return errors.New("revive failed")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Events().Claim(ctx, "/a", "p", testT.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, testT.Add(20*time.Second))
	clk.Advance(20*time.Second - time.Millisecond)
	select {
	case c := <-calls:
		t.Fatalf("handler ran early: %+v", c)
	default:
	}
	clk.Advance(time.Millisecond) // T+20s: due
	c := <-calls
	if c.Path != "/a" || c.Slug != "p" || c.Failures != 0 || !c.At.Equal(testT.Add(20*time.Second)) {
		t.Fatalf("first revive: got %+v", c)
	}
	// Spent → moved to its retry time now + 20 s with failures 1; the revive failed, so it stands.
	now := testT.Add(20 * time.Second)
	clk.WaitArmed(t, now.Add(20*time.Second))
	clk.Advance(20 * time.Second)
	if c := <-calls; c.Failures != 1 {
		t.Fatalf("second revive: got %+v, want failures 1", c)
	}
	now = now.Add(20 * time.Second)
	clk.WaitArmed(t, now.Add(40*time.Second)) // 20 s · 2
	fail.Store(false)
	clk.Advance(40 * time.Second)
	if c := <-calls; c.Failures != 2 {
		t.Fatalf("third revive: got %+v, want failures 2", c)
	}
	s.Events().StopAlarms() // waits for the handler's re-claim decision
	if got, _ := s.Events().Claims(ctx); len(got) != 0 {
		t.Fatalf("claims after a successful revive: got %+v, want none", got)
	}
}

func TestAlarmBackoffIsCapped(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	done := make(chan struct{}, 1)
	if err := s.Events().StartAlarms(func(ctx context.Context, c DueClaim) error {
		done <- struct{}{}
		return errors.New("no")
	}); err != nil {
		t.Fatal(err)
	}
	// A claim already failed 10 times: the next delay is capped at 30 min.
	if err := s.k.Write(ctx, func(tx *kernel.Tx) error {
		_, err := txExec(tx, `INSERT INTO claims(path, slug, at_ms, failures) VALUES ('/a', 'p', ?, 10)`, testT.UnixMilli())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.rearmAlarms()
	<-done
	clk.WaitArmed(t, testT.Add(foldtype.ReviveAfterMax))
	got, _ := s.Events().Claims(ctx)
	if len(got) != 1 || got[0].Failures != 11 || !got[0].At.Equal(testT.Add(foldtype.ReviveAfterMax)) {
		t.Fatalf("capped re-claim: got %+v", got)
	}
}

// Claims made before the alarm loop starts (a previous incarnation's) fire as soon as it starts.
func TestAlarmsFireOverdueClaimsOnStart(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	if err := s.Events().Claim(ctx, "/a", "p", testT.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Events().Claim(ctx, "/b", "q", testT.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	calls := make(chan DueClaim, 2)
	if err := s.Events().StartAlarms(func(ctx context.Context, c DueClaim) error { calls <- c; return nil }); err != nil {
		t.Fatal(err)
	}
	if c := <-calls; c.Path != "/a" {
		t.Fatalf("overdue: got %+v", c)
	}
	clk.WaitArmed(t, testT.Add(time.Hour))
	clk.Advance(time.Hour)
	if c := <-calls; c.Path != "/b" {
		t.Fatalf("later: got %+v", c)
	}
}

// The backoff never goes below the base nor above the cap, whatever the failure count. The bug:
// foldtype.ReviveAfter<<29 overflowed int64, so the 30th failed revive of a claim (after about 11
// hours of failures) was retried at once instead of 30 minutes later.
func TestRetryDelayNeverOverflows(t *testing.T) {
	t.Parallel()
	prev := time.Duration(0)
	for f := 0; f <= 100; f++ {
		d := retryDelay(f)
		if d < foldtype.ReviveAfter || d > foldtype.ReviveAfterMax || d < prev {
			t.Fatalf("retryDelay(%d) = %v (previous %v): want a non-decreasing delay in [%v, %v]",
				f, d, prev, foldtype.ReviveAfter, foldtype.ReviveAfterMax)
		}
		prev = d
	}
}
