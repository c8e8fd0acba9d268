package kernel

import (
	"sync"
	"sync/atomic"
)

// Commit watchers tell a host which streams changed without a subscription per stream: a host that
// runs a processor on every stream matching a pattern keeps engines open only for busy streams and
// needs the first commit on any other stream to open its engine.

// Callbacks is a list of functions called with each T, changed copy-on-write under mu so that
// the writer and the listener read it without a lock (commit watchers, change watchers, commit
// observers).
type Callbacks[T any] struct {
	mu   sync.Mutex
	next uint64
	list atomic.Pointer[[]callback[T]]
}

type callback[T any] struct {
	id uint64
	fn func(T)
}

// commitWatchers are called with the path of a stream a commit changed.
type commitWatchers = Callbacks[string]

// Add registers fn and returns the function that removes it.
func (c *Callbacks[T]) Add(fn func(T)) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	id := c.next
	var list []callback[T]
	if cur := c.list.Load(); cur != nil {
		list = append(list, *cur...)
	}
	list = append(list, callback[T]{id: id, fn: fn})
	c.list.Store(&list)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		var rest []callback[T]
		for _, e := range *c.list.Load() {
			if e.id != id {
				rest = append(rest, e)
			}
		}
		c.list.Store(&rest)
	}
}

// Registered reports whether a function is registered (the writer skips clock reads otherwise).
func (c *Callbacks[T]) Registered() bool {
	list := c.list.Load()
	return list != nil && len(*list) > 0
}

// Notify calls every registered function with v.
func (c *Callbacks[T]) Notify(v T) {
	if list := c.list.Load(); list != nil {
		for _, e := range *list {
			e.fn(v)
		}
	}
}
