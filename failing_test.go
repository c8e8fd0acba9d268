package foldstream_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// An engine's ProcessFailure stands until a commit gets past the failing event: a commit short of
// it (an empty push over an event the processor does not consume, as a host's read-your-writes
// sends) leaves it, so a host that follows ProcessFailure does not take the processor for healed;
// the commit that runs the event again successfully clears it.
func TestAProcessFailureStandsUntilACommitGetsPastItsEvent(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	var fail atomic.Bool
	fail.Store(true)
	p := newEph(t, "picky", "e")
	p.process = func(a *foldstream.ProcessEventArgs[seenState]) error {
		if a.Event != nil && fail.Load() {
			return errors.New("not yet")
		}
		return nil
	}
	mem := testsupport.NewMemoryStream()
	if _, err := mem.Append(ctx, foldtype.EventInput{Type: "other"}, foldtype.EventInput{Type: "e"}); err != nil { // 1, 2
		t.Fatal(err)
	}
	eng := newEngine[seenState](t, p, mem, testsupport.MemoryCheckpoints())
	if err := eng.CatchUpFromLog(ctx); err == nil {
		t.Fatal("catch-up: want the failure at offset 2")
	}
	if f := eng.ProcessFailure(); f == nil || f.Offset != 2 {
		t.Fatalf("failure after the catch-up: %+v, want one at offset 2", f)
	}
	if err := eng.ProcessEventBatch(ctx, nil, foldtype.ScannedRange{After: 0, Through: 1}); err != nil {
		t.Fatal(err)
	}
	if got := eng.ReducedThroughOffset(); got != 1 {
		t.Fatalf("cursor after the empty push: %d, want 1", got)
	}
	if f := eng.ProcessFailure(); f == nil || f.Offset != 2 {
		t.Fatalf("failure after a commit short of its event: %+v, want it standing at offset 2", f)
	}
	fail.Store(false)
	if err := eng.CatchUpFromLog(ctx); err != nil {
		t.Fatal(err)
	}
	if f := eng.ProcessFailure(); f != nil {
		t.Fatalf("failure after the event ran again: %+v, want none", f)
	}
}
