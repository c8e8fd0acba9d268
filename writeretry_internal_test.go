package foldstream

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// A write sent again through a database blip asks the guard before every new attempt, as before
// the first: a node that froze past its lease while it waited (a GC pause, a stopped VM) wakes to a
// guard that refuses, and the write is not sent again — another node runs the processor now, and
// its writes must not be overwritten by the frozen node's. The guard's refusal is the answer.
func TestAWriteSentAgainAsksTheGuardFirstAndStopsOnceTheLeaseIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Message: "the database is unavailable"}
		lost := &foldtype.Error{Code: foldtype.CodeLeaseLost, Message: "the lease ran out"}
		w := writeRetry{clock: foldtype.SystemClock{}, limit: 30 * time.Second, log: slog.New(slog.DiscardHandler), slug: "p", waits: &storeWaits{}}
		start := time.Now()
		var guards, writes int
		var frozenAt time.Time
		err := w.after(context.Background(), down, "checkpoint", always,
			func(context.Context) error {
				guards++
				if guards == 3 {
					// The node froze here for longer than its lease, and woke.
					time.Sleep(10 * time.Second)
					frozenAt = time.Now()
					return lost
				}
				return nil
			},
			func() error {
				writes++
				return down
			})
		if !errors.Is(err, lost) {
			t.Fatalf("after: %v, want the guard's refusal", err)
		}
		if guards != 3 || writes != 2 {
			t.Fatalf("%d guard checks and %d writes sent again; want 3 checks and 2 writes (none after the refusal)", guards, writes)
		}
		if frozenAt.Sub(start) < 10*time.Second {
			t.Fatalf("the freeze took %v", frozenAt.Sub(start))
		}
		if w.waits.oldest() != nil {
			t.Fatal("the status still shows the write waiting after the guard ended it")
		}
	})
}
