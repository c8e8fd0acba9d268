package stream

// Streams known to have no checkpoint rows (docs/store.md#engines-of-a-pattern).
//
// An engine opening in the writer (Events.HeadStreamForWork) reads the stream's checkpoint rows —
// over many fresh streams a query that finds none, once per stream. On an exclusive database every
// checkpoint write goes through this writer, and deleting a stream deletes the rows of its path in
// the same transaction; the only rows a stream the writer creates can find are those written while
// no stream row held its path (a Checkpoints handle made before the stream existed may write). So
// the writer notes the paths it wrote such rows for, and asks the database once, before the first
// event stream it creates while a host watches commits, whether any such rows are older than that
// (driver.StreamlessCheckpointFinder). When none are, a stream it creates at a path not noted
// has no checkpoint rows, and its entry says so until a checkpoint is written to the path: the
// opening skips the query. An entry read from its row (after a restart or an eviction) never says
// so.

// streamlessCheckpoints is what the writer knows of checkpoint rows whose scope no stream row holds.
type streamlessCheckpoints struct {
	// asked: the database was asked; none: it had none then.
	asked, none bool
	// written are the paths this writer wrote a checkpoint row for while no stream row held them.
	written map[string]bool
}

// wroteStreamless notes a checkpoint write to path while no stream row held it.
func (ws *writerState) wroteStreamless(path string) {
	k := &ws.checkpoints
	if k.written == nil {
		k.written = make(map[string]bool)
	}
	k.written[path] = true
}

// createsWithoutCheckpoints reports whether an event stream t is about to create at path has no
// checkpoint rows, asking the database first when it was not asked yet (before the stream row is
// inserted: a row at the path would hide the rows the question is about). It says false while no
// host watches commits (no engine opens in the writer) and when the database cannot tell.
func (s *Store) createsWithoutCheckpoints(t *tx, path string) bool {
	if !s.keepsRecent() {
		return false
	}
	k := &s.ws.checkpoints
	if !k.asked {
		has, known, err := t.db.hasStreamlessCheckpoints(t.ctx)
		k.asked, k.none = true, err == nil && known && !has // a failed question: not known
	}
	return k.none && !k.written[path]
}
