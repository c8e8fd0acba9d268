package stream

import (
	"sync"
	"sync/atomic"
)

// Commit watchers tell a host which streams changed without a subscription per stream: a host that
// runs a processor on every stream matching a pattern keeps engines open only for busy streams and
// needs the first commit on any other stream to open its engine.

// callbacks is a list of functions called with each T, changed copy-on-write under mu so that
// the writer and the listener read it without a lock (commit watchers, change watchers, commit
// observers).
type callbacks[T any] struct {
	mu   sync.Mutex
	next uint64
	list atomic.Pointer[[]callback[T]]
}

type callback[T any] struct {
	id uint64
	fn func(T)
}

// commitWatchers are called with the path of a stream a commit changed.
type commitWatchers = callbacks[string]

// WatchCommits calls fn with the path of every later commit that lands durable events (or
// event-shaped messages) on any stream, after the commit's subscribers were offered it; commits of
// ephemeral events only (live-state deltas among them) are not reported. On a shared database fn
// also hears of every commit another node announced (docs/postgres.md#live-reads), whether or not
// this node reads the stream — possibly of an ephemeral-only one, and before this node's
// subscribers got its events — and is called with the empty path when notifications may have been
// missed (the listener reconnected): anything may have changed. fn runs on the writer or the
// listener goroutine: it must return at once, never block and never call the store. The returned
// function stops the watch (a commit already landing may still call fn once).
func (e *Events) WatchCommits(fn func(path string)) (stop func()) { return e.s.landed.add(fn) }

// add registers fn and returns the function that removes it.
func (c *callbacks[T]) add(fn func(T)) (stop func()) {
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

// registered reports whether a function is registered (the writer skips clock reads otherwise).
func (c *callbacks[T]) registered() bool {
	list := c.list.Load()
	return list != nil && len(*list) > 0
}

// notify calls every registered function with v.
func (c *callbacks[T]) notify(v T) {
	if list := c.list.Load(); list != nil {
		for _, e := range *list {
			e.fn(v)
		}
	}
}

// ID returns the stream's identity in the store: a path deleted and created again gets a new one,
// so a host can tell the stream its engine follows from a later stream at the same path.
func (in StreamInfo) ID() int64 { return in.id }
