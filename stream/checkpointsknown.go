package stream

import (
	"sync/atomic"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Streams known to have no checkpoint rows (docs/store.md#engines-of-a-pattern).
//
// An engine opening in the writer (Events.ReadOpening for work) reads the stream's checkpoint rows —
// over many fresh streams a query that finds none, once per stream. On an exclusive database every
// checkpoint write goes through this writer, and deleting a stream deletes the rows of its path in
// the same transaction; the only rows a stream the writer creates can find are those written while
// no stream row held its path (a Checkpoints handle made before the stream existed may write). So
// the writer notes the paths it wrote such rows for, and asks the database once, when it first
// creates an event stream while a host watches commits, whether any such rows exist
// (driver.StreamlessCheckpointFinder). When none do, a stream it creates at a path not noted has
// no checkpoint rows, and its entry says so until a checkpoint is written to the path: the
// opening skips the query. An entry read from its row (after a restart or an eviction) never says
// so.
//
// The question reads every distinct checkpoint scope (about 0.6 s at a million of them), so it is
// asked in a read transaction of its own, not on the writer: the streams created before its
// answer arrives read their checkpoint rows as before. Its snapshot is taken after the writer
// started noting, so a row it cannot see was written through this writer: noted when no stream
// held its path, or deleted with the stream that held it.

// streamlessCheckpoints is what the writer knows of checkpoint rows whose scope no stream row holds.
type streamlessCheckpoints struct {
	// asked: the question was started (only the writer reads and sets it).
	asked bool
	// answer is the database's answer, stored by the question's goroutine: streamlessNone when no
	// checkpoint row's scope is a path without a stream row, streamlessUnknown when some is or
	// the question failed; zero until it arrives.
	answer atomic.Int32
	// written are the paths this writer wrote a checkpoint row for while no stream row held them.
	written map[string]bool
}

// The answers of the question (streamlessCheckpoints.answer).
const (
	streamlessNone    = 1
	streamlessUnknown = 2
)

// wroteStreamless notes a checkpoint write to path while no stream row held it.
func (ls *layerState) wroteStreamless(path string) {
	k := &ls.checkpoints
	if k.written == nil {
		k.written = make(map[string]bool)
	}
	k.written[path] = true
}

// createsWithoutCheckpoints reports whether an event stream t is about to create at path has no
// checkpoint rows. It says false while no host watches commits (no engine opens in the writer),
// until the database's answer arrived (the first call starts the question), and when the
// database cannot tell. Writer only.
func (s *Store) createsWithoutCheckpoints(t *kernel.Tx, path string) bool {
	if !s.keepsRecent() {
		return false
	}
	k := &s.ls.checkpoints
	if !k.asked {
		k.asked = true
		go s.askStreamlessCheckpoints(&k.answer)
		return false
	}
	return k.answer.Load() == streamlessNone && !k.written[path]
}

// askStreamlessCheckpoints asks the database whether any checkpoint row's scope is a path no
// stream row holds, and stores the answer. Close interrupts it; a store already closed answers
// nothing (Read fails), which leaves the question unanswered.
func (s *Store) askStreamlessCheckpoints(answer *atomic.Int32) {
	ctx, cancel := s.k.UntilClose()
	defer cancel()
	known, has := false, false
	err := s.k.Read(ctx, func(q driver.Reader) error {
		f, ok := q.(driver.StreamlessCheckpointFinder)
		if !ok {
			return nil
		}
		var err error
		has, err = f.HasStreamlessCheckpoints(ctx)
		known = err == nil
		return err
	})
	if err == nil && known && !has {
		answer.Store(streamlessNone)
		return
	}
	if err != nil && !s.k.Closed() {
		s.log.Warn("stream store: could not tell whether checkpoint rows without a stream exist; engine openings read their checkpoints", "err", err)
	}
	answer.Store(streamlessUnknown)
}
