package foldstream

// WaiterCount returns how many WaitUntilProcessed waiters are registered (tests only).
func (e *Engine[S]) WaiterCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.waiters)
}

// ReducesEvent exposes the loop guard to the tests.
var ReducesEvent = reducesEvent
