package foldstream

import "context"

// WaiterCount returns how many WaitUntilProcessed waiters are registered (tests only).
func (e *Engine[S]) WaiterCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.waiters)
}

// ReducesEvent exposes the loop guard to the tests.
var ReducesEvent = reducesEvent

// Changed returns a channel closed at the engine's next change: a unit queued or finished, the
// chain idle, a background attempt settled, Close.
func (e *Engine[S]) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// WorkStarted is the work-started marker's shape and WorkStartedKey its key, for the tests that
// read the marker from the key-value store.
type WorkStarted = workStarted

// WorkStartedKey is the marker's key-value key.
const WorkStartedKey = workStartedKey

// StopLivePublishing is what Engine.StopTakingWork does to the engine's live state.
func StopLivePublishing(l *LiveState) { l.stopPublishing() }

// WriteRetryForTest is an engine's write retry on clock at the default limit, for a write that
// cannot be stored twice.
func WriteRetryForTest(clock Clock) func(ctx context.Context, write func() error) error {
	w := writeRetry{clock: clock, limit: DefaultWriteRetry, slug: "test"}
	return func(ctx context.Context, write func() error) error {
		return w.after(ctx, write(), "test", always, nil, write)
	}
}
