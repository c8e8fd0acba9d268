package stream

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// TestAWriteSeesTheTimeItRunsAtNotWhenItsGroupBegan: a write that joins a group begun earlier
// (the writer waits for the callers it answered last, docs/store.md#one-writer) judges time — a
// sliding TTL's expiry, a record's creation time — by the clock when it runs, not when the group
// began. Otherwise a create right after a read found a stream expired could find it alive, by the
// group's older time, and refuse a path that is free.
func TestAWriteSeesTheTimeItRunsAtNotWhenItsGroupBegan(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	// Bounds no scheduling delay reaches: B joins A's group however slowly it comes.
	SetGatherWait(s, time.Hour)
	noop := func() error { return s.k.Write(ctx, func(*kernel.Tx) error { return nil }) }
	for i, err := range inOneGroup(t, s, noop, noop) { // the writer answers two callers at once
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	var aNow, bNow time.Time
	aRan := make(chan struct{})
	errB := make(chan error, 1)
	go func() {
		<-aRan
		clk.Advance(time.Minute) // B comes a minute later, into A's group
		errB <- s.k.Write(ctx, func(t *kernel.Tx) error { bNow = t.Now(); return nil })
	}()
	if err := s.k.Write(ctx, func(t *kernel.Tx) error { aNow = t.Now(); close(aRan); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if got := bNow.Sub(aNow); got != time.Minute {
		t.Fatalf("the write queued a minute after its group began ran %v after its first write by their clocks; want a minute", got)
	}
}
