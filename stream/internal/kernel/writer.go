package kernel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// The writer: the store's one concurrency rule for writes lives here (docs/store.md#one-writer).
//
// Every write is a function queued on s.writes. The writer goroutine takes the first queued
// function, drains whatever else is already queued (up to Config.MaxGroup), and runs the group
// in one driver transaction: each function inside its own savepoint, so a function that fails (a
// refused batch, a conflict) rolls back alone and its neighbours still commit. One commit — one
// fsync with synchronous=FULL — acknowledges the whole group (group commit). After the commit the
// writer applies the functions' staged in-memory changes, runs their after-commit hooks in queue
// order (fan-out to subscribers), brings the tail cache up to the commit and only then answers the
// callers, so a caller that got its answer can read its own write; last it wakes the touched
// streams' live readers.
//
// The writer goroutine is the only one that touches writerState, so offsets of a stream are
// assigned without a per-stream lock and two appends to the same stream can share one commit.

type writeReq struct {
	ctx     context.Context
	fn      func(t *Tx) error
	done    chan error
	holding *Hold // the hold whose stream fn may touch (hold.go), or nil
	// path, when set, is the stream fn is about to write: on a shared database the group reads
	// the rows of its writes' streams together (driver.StreamPrefetcher).
	path string
	// answers is Store.answers when the write was queued: a write queued since the writer last
	// answered its callers may come from one of them.
	answers uint64
}

// writerState is the state only the writer may touch, reachable only through a *tx (inside the
// writer's transaction). Changes are staged per write function and applied after the commit.
type writerState struct {
	// streams caches stream rows and offset state by path, at most Config.MaxCachedStreams of
	// them (streamcache.go). On an exclusive driver an entry is authoritative (every change to a
	// stream goes through this writer) and an evicted one is read again from its row; on a shared
	// database it is re-read under the stream's lock in every transaction, or, when the driver
	// checks rows without a round trip, trusted and checked under the lock in the transaction
	// (see Tx.Stream and Store.expected).
	streams *streamCache
	// marks are the streams marked in this incarnation (tx.mark; wake.go marks the streams that
	// got their wake record).
	marks markSet
	// held are the streams held by a write in several steps (hold.go); parked are the writes
	// that reached one and wait for it, requeue the writes released to run next.
	held    map[string]*Hold
	parked  []parkedWrite
	requeue []*writeReq
	// commitEst is a running average of how long a group's COMMIT takes.
	commitEst time.Duration
	// expects: the driver's write transactions check a stream's row without a round trip
	// (driver.StreamExpecter), learned at the first Begin. contended are the streams whose check
	// failed lately (another process wrote them), by id, with when the writer may rely on its own
	// entry of the stream again (see expected).
	expects   bool
	contended map[int64]time.Time
	// answered is how many callers the writer answered last, answeredAt when (see gather).
	answered   int
	answeredAt time.Time
	// gatherWait, when set, replaces both of gather's bounds (tests).
	gatherWait time.Duration
}

// contendedFor is how long a stream whose check failed is read under its lock in every write,
// rather than trusted to the writer's entry: another process is writing it, and a failed check
// costs the whole group a round trip and a second run.
const contendedFor = time.Second

// began notes a new group transaction of the writer: whether its driver checks rows without a
// round trip (driver.StreamExpecter).
func (s *Store) began(g *group, dtx driver.WriteTx) {
	_, s.ws.expects = dtx.(driver.StreamExpecter)
	if w, ok := dtx.(driver.EarlyCommitWatcher); ok && g.early != nil {
		w.OnEarlyCommit(g.early)
	}
}

// expected returns the writer's entry of the stream at path when a write may rely on it instead of
// reading the row under the stream's lock, sending a check with its statements instead
// (driver.StreamExpecter, docs/postgres.md#writes-round-trips): on a shared database whose driver
// can, for an entry from this node's own last commit of the stream, which is live, keeps no sliding
// TTL (its last access is persisted by writes the entry does not follow) and met no other process's
// write lately (contended).
func (s *Store) expected(path string) (*StreamState, bool) {
	if s.exclusive || !s.ws.expects {
		return nil, false
	}
	m, ok := s.ws.streams.get(path)
	if !ok || m.Row.ID == 0 || m.Row.State != 0 || m.Row.TTLSeconds.Valid {
		return nil, false
	}
	s.foldRemoteWrites()
	if until, ok := s.ws.contended[m.Row.ID]; ok {
		if s.clock.Now().Before(until) {
			return nil, false
		}
		delete(s.ws.contended, m.Row.ID)
	}
	return m, true
}

// staleRetry reports whether err is the failure of a check of a stream's row (the write relied on
// the writer's entry and another process changed the stream): the write runs again, reading the
// row under the lock, and the stream counts as contended for a while.
func (s *Store) staleRetry(err error) bool {
	var se *driver.StaleStreamError
	if !errors.As(err, &se) {
		return false
	}
	if s.ws.contended == nil {
		s.ws.contended = make(map[int64]time.Time)
	}
	s.ws.contended[se.StreamID] = s.clock.Now().Add(contendedFor)
	return true
}

// staleGroup notes, after a group's transaction was lost to a failed check of one stream's row
// (the StaleStreamError names only the first that failed), every stream the lost writes reached as
// contended: their writes run again reading each row under its lock (one round trip for all, see
// prefetch) instead of relying on the writer's entry once more. A failed check is the mark of
// another process writing the streams this node writes — a node that stopped and handed its
// processors over wrote many of them last — and without this each of those streams would cost the
// whole group another run: a group of a hundred writes over two dozen such streams ran two dozen
// times, holding every write of the node back for seconds on a busy machine
// (docs/postgres.md#graceful-hand-over).
func (s *Store) staleGroup(reqs []*writeReq, done []*Tx, epochs []int, final int) {
	if s.ws.contended == nil {
		s.ws.contended = make(map[int64]time.Time)
	}
	until := s.clock.Now().Add(contendedFor)
	mark := func(path string) {
		if m, ok := s.ws.streams.peek(path); ok && m.Row.ID != 0 {
			s.ws.contended[m.Row.ID] = until
		}
	}
	for i, r := range reqs {
		if epochs[i] < final {
			continue // committed early: not lost
		}
		if r.path != "" {
			mark(r.path)
		}
		if t := done[i]; t != nil {
			for p := range t.staged {
				mark(p)
			}
		}
	}
}

type group struct {
	w      driver.Writer
	dtx    driver.WriteTx
	staged map[string]*StreamState
	marks  map[int64]bool
	held   map[string]*Hold
	// busy are the streams of the group committing while this one is built (shared databases):
	// a function reaching one of them is refused with errInflight and runs again later.
	busy map[string]bool
	// deferred are the streams a function of this group was refused with errInflight: the
	// group's later functions that reach them are refused too, so none overtakes it.
	deferred map[string]bool
	// early is called when the group's transaction commits early (driver.EarlyCommitWatcher),
	// in the writer's goroutine, while the function that caused it still runs (set on a shared
	// database only).
	early func()
}

// Write queues fn on the writer and waits for its outcome. fn may run more than once, but only
// its last run counts: a run is discarded whole (its staged changes, hooks and answer) and fn runs
// again when it met a stream of the group still committing (errInflight) or when its group's
// transaction was lost to a failed check of a row it relied on (staleRetry, shared databases), so
// fn must reset whatever it sets outside tx at its start. If ctx ends before the writer reaches it,
// it does not run and ctx's error is returned. Once fn has run, write waits for the commit even if
// ctx ends meanwhile, so the caller never mistakes a committed write for a failed one.
func (s *Store) Write(ctx context.Context, fn func(t *Tx) error) error {
	return s.WriteTo(ctx, "", fn)
}

// WriteTo is Write for a function that writes to the stream at path (a hint: it may touch others
// or none).
func (s *Store) WriteTo(ctx context.Context, path string, fn func(t *Tx) error) error {
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1), path: path, answers: s.answers.Load()}
	if err := s.enqueue(ctx, r); err != nil {
		return err
	}
	// A full disk fails a write with INSUFFICIENT_STORAGE: nothing of it was committed.
	return s.classifyStorageErr(<-r.done)
}

// enqueue hands r to the writer. The check of closed and the send happen under intakeMu's read
// lock, which Close takes for writing when it stops intake: a write is either queued before intake
// stops (and then runs before Close returns) or refused with ErrStoreClosed. The writes channel is
// never closed, so no send can race a close.
func (s *Store) enqueue(ctx context.Context, r *writeReq) error {
	s.intakeMu.RLock()
	defer s.intakeMu.RUnlock()
	if s.closed.Load() {
		return ErrStoreClosed
	}
	select {
	case s.writes <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DefaultMaxCommitsInFlight is the default of Config.MaxCommitsInFlight.
const DefaultMaxCommitsInFlight = 1

func (s *Store) runWriter(w driver.Writer) {
	defer s.writerWG.Done()
	batch := make([]*writeReq, 0, s.opts.MaxGroup)
	lastGroup := 0
	// inflight are the groups whose COMMIT is on its way, oldest first (shared databases only,
	// see docs/store.md#one-writer): the next group is built meanwhile, on a connection of its
	// own, and up to maxInflight commits may be on their way together. They are finished in the
	// order they were sealed.
	var inflight []*building
	maxInflight := s.opts.MaxCommitsInFlight
	for {
		var first *writeReq
		if rq := s.ws.requeue; len(rq) > 0 {
			first, s.ws.requeue = rq[0], rq[1:]
		} else if len(inflight) > 0 {
			select {
			case first = <-s.writes:
			case <-inflight[0].committed:
				s.finish(w, inflight[0])
				inflight = inflight[1:]
				continue
			case <-s.intakeStopped:
				select {
				case first = <-s.writes:
				default:
					s.finish(w, inflight[0])
					inflight = inflight[1:]
					continue
				}
			}
		} else {
			select {
			case first = <-s.writes:
			case <-s.intakeStopped:
				// Close stopped intake: whatever is still queued was accepted before, so it runs;
				// then the writer is done. Parked writes wait for holds that cannot end
				// now (their appends can queue nothing more): they are refused.
				select {
				case first = <-s.writes:
				default:
					s.refuseParked()
					return
				}
			}
		}
		// When the last group had company, callers it just answered are probably about to queue
		// again: yield a few times before closing the group so they share its commit (one fsync)
		// instead of each paying for a nearly empty one.
		batch = s.drain(append(batch[:0], first), s.opts.MaxGroup, lastGroup > 1 && len(inflight) == 0)
		// Groups whose commit is known are finished first: their streams are free again.
		inflight = s.finishCommitted(w, inflight)
		if len(inflight) > 0 && !allHinted(batch) {
			// A write that names no stream may touch anything: it waits for every commit.
			for _, f := range inflight {
				s.finish(w, f)
			}
			inflight = inflight[:0]
		}
		b := s.newBuilding(w, inflight)
		b.add(batch)
		if s.exclusive {
			s.gather(b, batch)
		}
		for len(inflight) >= maxInflight {
			// No commit may start before the oldest one is known: build on with the writes that
			// arrive meanwhile, which share b's commit instead of waiting for a group of their own.
			s.extend(b, inflight[0])
			answered := len(inflight[0].reqs)
			s.finish(w, inflight[0])
			inflight = s.finishCommitted(w, inflight[1:])
			// The callers just answered may queue again at once (in-process ones do): let them
			// join this group, as they would join a group started after the commit, rather than
			// leave them a group of their own that waits for this one's commit. The finished
			// groups' streams are free again.
			b.g.busy = busyOf(inflight)
			if len(b.reqs) < s.opts.MaxGroup && b.broken == nil {
				more := s.drain(batch[:0], s.opts.MaxGroup-len(b.reqs), true)
				n := len(more)
				for i, r := range more {
					if r.path == "" {
						s.ws.requeue = append(s.ws.requeue, more[i:]...)
						n = i
						break
					}
				}
				b.add(more[:n])
			}
			if len(inflight) == 0 {
				// The callers just answered are about to queue again (over HTTP: their answer
				// travels, their next request comes back): wait a little for them, so that they
				// share this commit instead of each waiting for the next one.
				s.linger(b, len(b.reqs)+answered)
			}
		}
		lastGroup = len(b.reqs)
		if s.exclusive || !b.hinted {
			b.commit()
			s.finish(w, b)
			continue
		}
		b.seal()
		go b.commit()
		inflight = append(inflight, b)
	}
}

// maxLinger caps how long a group built during a commit waits, after that commit, for the callers
// it answered to queue again (see linger).
const maxLinger = 2 * time.Millisecond

// noteCommit folds b's COMMIT time into the writer's running estimate (shared databases).
func (s *Store) noteCommit(b *building) {
	if b.took <= 0 || b.commitErr != nil {
		return
	}
	if s.ws.commitEst == 0 {
		s.ws.commitEst = b.took
	} else {
		s.ws.commitEst += (b.took - s.ws.commitEst) / 8
	}
}

// linger adds to b, whose COMMIT is next, the writes that arrive until b holds want writes, for at
// most a quarter of a commit's usual time (maxLinger at most): the callers of the group just
// finished, which the commit in flight kept waiting, get into this commit instead of the next
// one. With every caller in each commit a closed loop of W callers (one request at a time each)
// puts all W into every WAL flush rather than half of them into alternate ones. A write that
// names no stream ends the wait and runs after b.
func (s *Store) linger(b *building, want int) {
	wait := min(s.ws.commitEst/4, maxLinger)
	if want > s.opts.MaxGroup {
		want = s.opts.MaxGroup
	}
	if len(b.reqs) >= want || wait <= 0 || b.broken != nil {
		return
	}
	// The arrivals are run together at the end: their streams' rows are read in one round trip.
	more := make([]*writeReq, 0, want-len(b.reqs))
	defer func() { b.add(more) }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(b.reqs)+len(more) < want {
		select {
		case <-timer.C:
			return
		case r := <-s.writes:
			if r.path == "" {
				s.ws.requeue = append(s.ws.requeue, r)
				return
			}
			more = append(more, r)
		}
	}
}

// gather adds to b, whose COMMIT is next on an exclusive driver, the writes of the callers the
// writer answered last that queue again within a commit's usual time (maxLinger at most), each
// run as it arrives. On one connection nothing overlaps a commit: without the wait the callers
// answered after one commit miss the group built from the writes that queued during it, and W
// callers in a closed loop (one request at a time each, as HTTP clients are) settle into two
// halves taking turns, each paying a commit — its fsync and its CPU — for half of them. A caller
// alone never waits, nor does a group whose callers have all queued again or were answered
// longer than maxAnsweredAge ago. buf is scratch space.
func (s *Store) gather(b *building, buf []*writeReq) {
	ws := &s.ws
	wait, age := min(ws.commitEst, maxLinger), maxAnsweredAge
	if ws.gatherWait > 0 {
		wait, age = ws.gatherWait, ws.gatherWait
	}
	if ws.answered < 2 || b.broken != nil || time.Since(ws.answeredAt) > age {
		return
	}
	cur := s.answers.Load()
	back := 0
	for _, r := range b.reqs {
		if r.answers == cur {
			back++
		}
	}
	want := min(len(b.reqs)+ws.answered-back, s.opts.MaxGroup)
	if len(b.reqs) >= want || wait <= 0 {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(b.reqs) < want && b.broken == nil {
		select {
		case <-timer.C:
			return
		case r := <-s.writes:
			b.add(s.drain(append(buf[:0], r), s.opts.MaxGroup-len(b.reqs), false))
		}
	}
}

// maxAnsweredAge bounds how long after answering its callers the writer still expects them to
// queue again (gather).
const maxAnsweredAge = 5 * time.Millisecond

// finishCommitted finishes, oldest first, the groups of inflight whose commit is known, up to the
// first whose commit is still on its way, and returns the rest.
func (s *Store) finishCommitted(w driver.Writer, inflight []*building) []*building {
	for len(inflight) > 0 {
		select {
		case <-inflight[0].committed:
			s.finish(w, inflight[0])
			inflight = inflight[1:]
		default:
			return inflight
		}
	}
	return inflight
}

// busyOf is the union of the streams the groups of inflight keep from the next group (nil: none).
func busyOf(inflight []*building) map[string]bool {
	switch len(inflight) {
	case 0:
		return nil
	case 1:
		return inflight[0].busy
	}
	busy := make(map[string]bool)
	for _, f := range inflight {
		for p := range f.busy {
			busy[p] = true
		}
	}
	return busy
}

// drain adds to batch, up to max writes, the requeued writes and whatever is queued; with yield it
// yields a few times first when nothing is queued, so callers about to queue get in.
func (s *Store) drain(batch []*writeReq, max int, yield bool) []*writeReq {
	yields := 0
	if yield {
		yields = 8
	}
	for len(batch) < max {
		if rq := s.ws.requeue; len(rq) > 0 {
			batch, s.ws.requeue = append(batch, rq[0]), rq[1:]
			continue
		}
		select {
		case r := <-s.writes:
			batch = append(batch, r)
		default:
			if yields == 0 {
				return batch
			}
			yields--
			runtime.Gosched()
		}
	}
	return batch
}

// allHinted reports whether every write of reqs names the stream it writes (WriteTo).
func allHinted(reqs []*writeReq) bool {
	for _, r := range reqs {
		if r.path == "" {
			return false
		}
	}
	return true
}

// building is a group of write functions: run in one transaction, then committed (perhaps while
// the next group is built), then finished — its staged changes applied and its callers answered.
type building struct {
	s       *Store
	g       *group
	reqs    []*writeReq
	results []error
	// done holds each successful function's tx (its staged changes and hooks), epochs the group
	// transaction's lock epoch right after the function ran: a function that ran before an early
	// commit (driver.LockKeeper) is committed whatever becomes of the rest of the group.
	done   []*Tx
	epochs []int
	// earlyWoken: the functions before it had their streams' readers woken after an early
	// commit (earlyCommitted).
	earlyWoken int
	broken     error
	// hinted: every write named its stream, so the group's commit may overlap the next group.
	hinted bool
	// rows and recs are each touched stream's row after the group (nil: deleted or not known) and
	// the records the group appended to it, when the database is shared (they travel with its
	// notification) or the tail cache is in use: they bring the tail cache up to the commit.
	rows map[int64]*driver.Stream
	recs map[int64][]driver.Record
	// busy are the streams (paths) the group may hold locks on or has staged changes to, set by
	// seal: the next group does not touch them until this one is finished.
	busy   map[string]bool
	sealed bool
	// commitErr is the outcome of commit; committed is closed once it is known.
	commitErr  error
	committed  chan struct{}
	commitTime time.Duration
	observed   bool
	// took is how long the COMMIT took on the wall clock (its round trip and the WAL flush).
	took time.Duration
}

// newBuilding starts a group. Its functions leave alone the streams of the groups of inflight,
// whose commits are on their way (errInflight).
func (s *Store) newBuilding(w driver.Writer, inflight []*building) *building {
	b := &building{s: s, g: &group{w: w, staged: make(map[string]*StreamState), busy: busyOf(inflight)},
		hinted: true, committed: make(chan struct{})}
	if !s.exclusive {
		b.g.early = b.earlyCommitted // only a shared database's transaction commits early
	}
	return b
}

// extend adds writes to b, which is built while inflight commits, until inflight's commit is
// known: the writes that arrive meanwhile share b's commit instead of waiting for a group of their
// own. A write that names no stream ends the extension and runs after both.
func (s *Store) extend(b *building, inflight *building) {
	more := make([]*writeReq, 0, s.opts.MaxGroup)
	for len(b.reqs) < s.opts.MaxGroup && b.broken == nil {
		select {
		case <-inflight.committed:
			return
		case r := <-s.writes:
			more = append(more[:0], r)
		drain:
			for len(b.reqs)+len(more) < s.opts.MaxGroup {
				select {
				case r := <-s.writes:
					more = append(more, r)
				default:
					break drain
				}
			}
			for i, r := range more {
				if r.path == "" {
					s.ws.requeue = append(s.ws.requeue, more[i:]...)
					b.add(more[:i])
					return
				}
			}
			b.add(more)
		}
	}
}

// earlyCommitted is called when the group's transaction committed early (driver.LockKeeper,
// driver.EarlyCommitWatcher), while one of its functions runs: every function that finished
// before it is durable now, before the group ends (the running one changed nothing yet: a split
// happens only then, and its done entry is still nil). This
// node hears no notification of its own commits, so the tail cache entries of their streams would
// stay at the tails before them until the group is finished — and a live read served from such an
// entry would claim "up to date" at a tail the database has passed. The entries are dropped and
// the streams' readers woken; they read the database until an entry is seeded again. The
// callers are still answered when the group is finished (applyCommitted).
func (b *building) earlyCommitted() {
	i := len(b.done)
	for j := b.earlyWoken; j < i; j++ {
		if t := b.done[j]; t != nil {
			for id, p := range t.touched {
				b.s.wake(id)
				b.s.changes.Notify(p)
			}
		}
	}
	b.earlyWoken = i
}

// add runs reqs in b's transaction, each in its own savepoint.
func (b *building) add(reqs []*writeReq) {
	s, g := b.s, b.g
	ctx := context.Background()
	if b.broken == nil {
		b.broken = s.prefetch(g, reqs)
	}
	for _, r := range reqs {
		if r.path == "" {
			b.hinted = false
		}
		b.reqs = append(b.reqs, r)
		b.done = append(b.done, nil)
		b.results = append(b.results, nil)
		b.epochs = append(b.epochs, lockEpochOf(g.dtx))
		i := len(b.reqs) - 1
		if b.broken != nil {
			b.results[i] = b.broken
			continue
		}
		if err := r.ctx.Err(); err != nil {
			b.results[i] = err // the caller went away before its turn: do no work for it
			continue
		}
		// Each write's own time: one that joins the group later (gather, extend) judges expiry
		// and stamps records by the clock when it runs, not when the group began.
		t := &Tx{s: s, g: g, ctx: r.ctx, now: s.clock.Now(), holding: r.holding,
			staged: make(map[string]*StreamState), touched: make(map[int64]string)}
		t.db.t = t
		err := t.run(r.fn)
		if t.aloneErr != nil && b.broken == nil {
			b.broken = fmt.Errorf("stream store: a write's only statement failed: %w", t.aloneErr)
		}
		if t.spSet {
			if err != nil {
				if rbErr := g.dtx.RollbackToSavepoint(ctx); rbErr != nil {
					// SQLite rolls the whole transaction back by itself after some errors (a full
					// disk): keep that cause beside the rollback's own failure.
					b.broken = fmt.Errorf("stream store: roll back a refused write: %w (after: %w)", rbErr, err)
				}
			}
			if relErr := g.dtx.ReleaseSavepoint(ctx); relErr != nil && b.broken == nil {
				b.broken = fmt.Errorf("stream store: release savepoint: %w", relErr)
			}
		}
		b.epochs[i] = t.lockEpoch()
		if err != nil {
			b.results[i] = err
			continue
		}
		b.done[i] = t
		// Later functions of the group see this one's staged changes.
		if t.holdStart != nil {
			if g.held == nil {
				g.held = make(map[string]*Hold)
			}
			g.held[t.holdStart.Path] = t.holdStart
		}
		for p, m := range t.staged {
			g.staged[p] = m
		}
		for id := range t.marks {
			if g.marks == nil {
				g.marks = make(map[int64]bool)
			}
			g.marks[id] = true
		}
	}
}

// seal queues the group's notifications and notes the streams the next group must leave alone
// until this one is finished: every stream a write named (its lock may be held from the group's
// prefetch) and every stream a write staged.
func (b *building) seal() {
	s, g := b.s, b.g
	b.sealed = true
	if !s.exclusive {
		b.busy = make(map[string]bool, len(b.reqs)+len(g.staged))
		for _, r := range b.reqs {
			b.busy[r.path] = true
		}
		for p := range g.staged {
			b.busy[p] = true
		}
	}
	if g.dtx == nil || b.broken != nil {
		return
	}
	touched, ephs := changesOf(b.done)
	if !s.exclusive || s.tails.inUse() {
		b.rows, b.recs = s.rowsAfter(g, touched), recordsOf(b.done)
	}
	if err := notifyAll(context.Background(), g.dtx, touched, ephs, b.rows, b.recs); err != nil {
		b.broken = fmt.Errorf("stream store: notify: %w", err)
	}
}

// commit commits the group's transaction, if any, and closes b.committed. It touches nothing of
// the writer's state, so it may run on a goroutine of its own while the next group is built.
func (b *building) commit() {
	defer close(b.committed)
	if !b.sealed {
		b.seal()
	}
	if b.g.dtx == nil || b.broken != nil {
		return
	}
	b.observed = b.s.observers.Registered()
	var start time.Time
	if b.observed {
		start = b.s.clock.Now()
	}
	sent := time.Now()
	b.s.commitSent(b, sent)
	b.commitErr = b.g.dtx.Commit(context.Background())
	b.took = time.Since(sent)
	b.s.commitDone(b, b.commitErr)
	if b.observed {
		b.commitTime = b.s.clock.Now().Sub(start)
	}
}

// finish waits for b's commit, settles what a failure means for each write (a write committed
// early by a split stays committed), applies the committed writes and answers the callers.
func (s *Store) finish(w driver.Writer, b *building) {
	<-b.committed
	s.noteCommit(b)
	ctx := context.Background()
	g, reqs, results, done := b.g, b.reqs, b.results, b.done
	if g.dtx != nil {
		commitErr := b.broken
		if commitErr == nil {
			if b.commitErr != nil {
				commitErr = fmt.Errorf("stream store: commit: %w", b.commitErr)
			} else {
				s.commits.Add(1)
			}
			if b.observed {
				writes := 0
				for _, e := range results {
					if e == nil {
						writes++
					}
				}
				s.observers.Notify(CommitStats{Writes: writes, Duration: b.commitTime, Failed: b.commitErr != nil})
			}
		}
		if commitErr != nil {
			if foldtype.CodeOf(commitErr) == foldtype.CodeCommitOutcomeUnknown {
				s.forgetUnknown(reqs, done)
			}
			b.rows, b.recs = nil, nil // what is committed is not the whole group
			// The group's last transaction is lost; the functions before its start are not.
			final := lockEpochOf(g.dtx)
			_ = g.dtx.Rollback(ctx)
			// A failed check of a stream's row (another process wrote it): the functions of the
			// lost transaction decided on rows that were not current, whatever they answered, so
			// they all run again (applyCommitted requeues them).
			var se *driver.StaleStreamError
			stale := errors.As(commitErr, &se)
			if stale {
				s.staleGroup(reqs, done, b.epochs, final)
			}
			early := false
			for i := range reqs {
				if b.epochs[i] < final {
					early = early || done[i] != nil
					continue
				}
				if results[i] == nil || stale {
					results[i] = commitErr
				}
				done[i] = nil
			}
			if early {
				// Their notification was to travel with the lost commit: other processes sharing
				// the database hear of their writes in a transaction of its own.
				touched, ephs := changesOf(done)
				s.notifyCommitted(ctx, w, touched, ephs)
			}
		}
	}
	// A group that could not reach the database (taking a connection, a statement, its COMMIT)
	// says the commits stall as a failed COMMIT does (health.go).
	for _, e := range results {
		if e != nil && stallError(e) {
			s.commitsStall("a write failed: " + e.Error())
			break
		}
	}
	s.applyCommitted(reqs, results, done, b.rows, b.recs)
}

// forgetUnknown drops what the writer holds of the streams of a group whose COMMIT outcome is not
// known (COMMIT_OUTCOME_UNKNOWN: it may be written or not): their cached rows, tails and producer
// states may be behind the database, so the next write of each reads its row (and producers)
// again, and their readers are woken to read what the database has. The writer then goes on.
func (s *Store) forgetUnknown(reqs []*writeReq, done []*Tx) {
	for _, r := range reqs {
		if r.path != "" {
			s.ws.streams.remove(r.path)
		}
	}
	for _, t := range done {
		if t == nil {
			continue
		}
		for p := range t.staged {
			s.ws.streams.remove(p)
		}
		for id, p := range t.touched {
			s.wake(id)
			s.changes.Notify(p)
		}
	}
}

// errInflight refuses a write that reached a stream the group committing before its own may
// still change (docs/store.md#one-writer): the writer runs it again once that commit is known.
var errInflight = errors.New("stream store: stream in a group whose commit is on its way")

// prefetch begins the group's transaction and reads the rows of the streams its writes are
// about to write (each under its lock when that is free at once) in one round trip, instead of
// one round trip per write, when the database is shared and the driver can (see
// driver.StreamPrefetcher). A group built while another commits may prefetch several times, once
// per arrival of writes. An error fails the whole group.
func (s *Store) prefetch(g *group, reqs []*writeReq) error {
	if s.exclusive || (len(reqs) < 2 && g.dtx == nil) {
		return nil
	}
	var paths []string
	seen := make(map[string]bool, len(reqs))
	for _, r := range reqs {
		if r.path != "" && !seen[r.path] && !g.busy[r.path] && !g.deferred[r.path] && r.ctx.Err() == nil {
			if _, ok := g.staged[r.path]; ok {
				continue // an earlier function of the group read it
			}
			if _, ok := s.expected(r.path); ok {
				continue // its write relies on the writer's entry, checked with the commit
			}
			seen[r.path] = true
			paths = append(paths, r.path)
		}
	}
	if len(paths) < 2 && g.dtx == nil || len(paths) == 0 {
		return nil
	}
	ctx := context.Background()
	if g.dtx == nil {
		dtx, err := g.w.Begin(ctx)
		if err != nil {
			return fmt.Errorf("stream store: begin: %w", err)
		}
		g.dtx = dtx
		s.began(g, dtx)
	}
	if p, ok := g.dtx.(driver.StreamPrefetcher); ok {
		if err := p.PrefetchStreams(ctx, paths); err != nil {
			return fmt.Errorf("stream store: read the group's streams: %w", err)
		}
	}
	return nil
}

// errParked marks a write parked behind a hold (not answered yet).
var errParked = errors.New("stream store: write parked")
