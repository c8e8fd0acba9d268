package wait_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
)

// TestForReturnsOnceTheConditionHolds: a condition another goroutine makes true ends the wait on
// the next tick, not at the deadline.
func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var done atomic.Bool
		time.AfterFunc(35*time.Millisecond, func() { done.Store(true) })
		start := time.Now()
		if !wait.For(time.Hour, done.Load) {
			t.Fatal("For gave up on a condition that came true")
		}
		if got := time.Since(start); got != 40*time.Millisecond {
			t.Fatalf("For returned after %v, want the first tick after the change (40ms)", got)
		}
	})
}

// TestForGivesUpAtItsDeadline: a condition that never holds fails after exactly the timeout.
func TestForGivesUpAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		checks := 0
		if wait.Every(time.Second, 100*time.Millisecond, func() bool { checks++; return false }) {
			t.Fatal("For reported a condition that never held")
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("For gave up after %v, want 1s", got)
		}
		if checks < 10 || checks > 12 {
			t.Fatalf("%d checks in 1s at 100ms, want about 11", checks)
		}
	})
}
