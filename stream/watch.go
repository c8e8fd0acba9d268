package stream

import (
	"sync"
	"sync/atomic"
)

// Commit watchers tell a host which streams changed without a subscription per stream: a host that
// runs a processor on every stream matching a pattern keeps engines open only for busy streams and
// needs the first commit on any other stream to open its engine.

type commitWatchers struct {
	mu   sync.Mutex
	next uint64
	list atomic.Pointer[[]commitWatcher] // read lock-free by publish
}

type commitWatcher struct {
	id uint64
	fn func(path string)
}

// WatchCommits calls fn with the path of every later commit that lands durable events (or
// event-shaped messages) on any stream, after the commit's subscribers were offered it; commits of
// ephemeral events only (live-state deltas among them) are not reported. On a shared database fn
// also hears of every commit another node announced (docs/postgres.md#live-reads), whether or not
// this node reads the stream — possibly of an ephemeral-only one, and before this node's
// subscribers got its events — and is called with the empty path when notifications may have been
// missed (the listener reconnected): anything may have changed. fn runs on the writer or the
// listener goroutine: it must return at once, never block and never call the store. The returned
// function stops the watch (a commit already landing may still call fn once).
func (s *Store) WatchCommits(fn func(path string)) (stop func()) { return s.ev.watchers.add(fn) }

// add registers fn (copy-on-write, so notify reads the list without a lock) and returns the
// function that removes it.
func (w *commitWatchers) add(fn func(path string)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	id := w.next
	var list []commitWatcher
	if cur := w.list.Load(); cur != nil {
		list = append(list, *cur...)
	}
	list = append(list, commitWatcher{id: id, fn: fn})
	w.list.Store(&list)
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		var rest []commitWatcher
		for _, c := range *w.list.Load() {
			if c.id != id {
				rest = append(rest, c)
			}
		}
		w.list.Store(&rest)
	}
}

func (w *commitWatchers) notify(path string) {
	if list := w.list.Load(); list != nil {
		for _, c := range *list {
			c.fn(path)
		}
	}
}

// ID returns the stream's identity in the store: a path deleted and created again gets a new one,
// so a host can tell the stream its engine follows from a later stream at the same path.
func (in StreamInfo) ID() int64 { return in.id }

// WatchChanges calls fn with the path of every stream a later commit changed — any write, by
// this process or (on a shared database) another one; "" means any stream may have changed (a
// notification channel that recovered). fn runs on the writer goroutine or the notification
// listener: it must return at once, never block and never call the store. The returned function
// stops the watch.
func (s *Store) WatchChanges(fn func(path string)) (stop func()) { return s.changes.add(fn) }
