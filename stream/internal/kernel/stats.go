package kernel

import "time"

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

// commitObservers are called with the figures of each group commit.
type commitObservers = Callbacks[CommitStats]

// ObserveCommits calls fn after every later group commit with its size and duration, for metrics.
// fn runs on the writer goroutine: it must return at once, never block and never call the store.
// The returned function stops the observation (a commit already landing may still call fn once).
func (s *Store) ObserveCommits(fn func(CommitStats)) (stop func()) { return s.observers.Add(fn) }

// WriterQueue returns how many writes wait for the store's writer now, queued and not yet taken
// into a group commit: a backlog that grows says the database commits slower than writes arrive.
// It reads a channel's length: no lock, for metrics at scrape time.
func (s *Store) WriterQueue() int { return len(s.writes) }
