package stream

import (
	"sync"
	"sync/atomic"
	"time"
)

// CommitStats describes one group commit of the store's writer (Store.ObserveCommits).
type CommitStats struct {
	// Writes is the number of writes (appends, creates, deletes, checkpoint writes, ...) the
	// commit made durable together.
	Writes int
	// Duration is how long the commit itself took, measured on the store's clock: the fsync of a
	// SQLite file, the round trip of a PostgreSQL COMMIT.
	Duration time.Duration
	// Failed reports that the commit failed: none of its writes was acknowledged.
	Failed bool
}

type commitObservers struct {
	mu   sync.Mutex
	next uint64
	list atomic.Pointer[[]commitObserver] // read lock-free by the writer
}

type commitObserver struct {
	id uint64
	fn func(CommitStats)
}

// ObserveCommits calls fn after every later group commit with its size and duration, for metrics.
// fn runs on the writer goroutine: it must return at once, never block and never call the store.
// The returned function stops the observation (a commit already landing may still call fn once).
func (s *Store) ObserveCommits(fn func(CommitStats)) (stop func()) {
	o := &s.observers
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	id := o.next
	var list []commitObserver
	if cur := o.list.Load(); cur != nil {
		list = append(list, *cur...)
	}
	list = append(list, commitObserver{id: id, fn: fn})
	o.list.Store(&list)
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		var rest []commitObserver
		for _, c := range *o.list.Load() {
			if c.id != id {
				rest = append(rest, c)
			}
		}
		o.list.Store(&rest)
	}
}

// observing reports whether anyone observes commits (the writer skips the clock reads otherwise).
func (o *commitObservers) observing() bool {
	list := o.list.Load()
	return list != nil && len(*list) > 0
}

func (o *commitObservers) notify(st CommitStats) {
	if list := o.list.Load(); list != nil {
		for _, c := range *list {
			c.fn(st)
		}
	}
}
