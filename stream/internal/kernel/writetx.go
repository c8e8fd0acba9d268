package kernel

import (
	"context"
	"fmt"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// A write function's transaction (Tx): the group's driver transaction seen by one write, with
// the writer's view of each stream it touches (StreamState: rows, producers, staged changes) and
// the hooks that run after the group commits.

// StreamState is the writer's view of one stream.
type StreamState struct {
	// Row is the stream row as of the last write (its Tail field is not maintained; use Tail).
	Row driver.Stream
	// HighestAssigned is the highest offset handed out in this incarnation, ephemerals included.
	HighestAssigned int64
	// Tail is the durable mark: the end of the last committed record.
	Tail int64
	// epoch is the group transaction's lock epoch when Row was read or written under the
	// stream's lock (shared databases; see driver.LockKeeper).
	epoch int
	// producers caches the state of the stream's idempotent producers looked up or written since
	// the entry was loaded (a zero Producer: none stored). On an exclusive driver every write of a
	// producer's state goes through this writer; on a shared database the entry lives only while
	// its group holds the stream's lock (it is read again under the lock in every group and after
	// an early commit, see Tx.Stream), and every write of a stream's producers takes that lock.
	// The map is never changed in place: copies of the entry share it (see Tx.Stream), so
	// setProducer replaces it.
	producers map[string]driver.Producer
	// producersAll reports that producers holds every producer stored for the stream, so a
	// producer missing from it has no state and needs no lookup. Only on an exclusive driver, and
	// only for a stream this writer created in this incarnation (its fresh id has no producer
	// rows: ids are never reused, and the rows of a deleted stream go with it): every later write
	// of its producers goes through this entry, which loses the mark when the cap leaves one out.
	// An entry read from its row (after a restart or an eviction) does not have it.
	producersAll bool
	// ext is what the layers keep beside the entry (RowExt): staged, copied and committed with it.
	ext [maxRowExts]any
}

// maxRowExts caps the row extensions the layers may register.
const maxRowExts = 2

// RowExt is a row extension: a field of type T that a layer keeps beside each stream's entry in
// the writer's cache, staged, copied and committed with the entry as the entry's own fields are;
// the kernel carries it and never reads it. Its zero value is T's zero value. Register one with
// NewRowExt when the store opens; read and set it on a StreamState a write function holds (or,
// in a hook the writer runs, on the committed entry).
type RowExt[T any] struct{ slot int }

// NewRowExt registers a row extension of type T (while the store opens: see Open's use).
func NewRowExt[T any](s *Store) RowExt[T] {
	if s.rowExts == maxRowExts {
		panic("kernel: more row extensions than maxRowExts")
	}
	s.rowExts++
	return RowExt[T]{slot: s.rowExts - 1}
}

// Get returns the extension's value on m.
func (e RowExt[T]) Get(m *StreamState) T {
	v, _ := m.ext[e.slot].(T)
	return v
}

// Set sets the extension's value on m.
func (e RowExt[T]) Set(m *StreamState, v T) { m.ext[e.slot] = v }

// maxCachedProducers caps the producers cached per stream; the others are looked up each time.
const maxCachedProducers = 8

// Producer returns the state of producer id on the stream: from the entry's cache when it has
// it (on a shared database: looked up or written earlier in the group, under the stream's lock the
// group still holds), else from the database. A group of several batches of one producer reads
// its row once.
func (t *Tx) Producer(m *StreamState, id string) (driver.Producer, bool, error) {
	if p, ok := m.producers[id]; ok {
		return p, p.ID != "", nil
	}
	if m.producersAll {
		return driver.Producer{}, false, nil
	}
	p, known, err := t.db.Producer(t.ctx, m.Row.ID, id)
	if err != nil {
		return driver.Producer{}, false, err
	}
	m.setProducer(id, p)
	return p, known, nil
}

// PutProducer stores the producer's state on the stream and caches it.
func (t *Tx) PutProducer(m *StreamState, p driver.Producer) error {
	if err := t.db.PutProducer(t.ctx, m.Row.ID, p); err != nil {
		return err
	}
	m.setProducer(p.ID, p)
	return nil
}

// setProducer caches p as the state of producer id (zero: none stored) when the cap allows, in a
// fresh map: the old one may be shared with the committed entry, which a rolled-back write must
// leave as it was. A stored producer the cap leaves out ends producersAll.
func (m *StreamState) setProducer(id string, p driver.Producer) {
	if _, ok := m.producers[id]; !ok && len(m.producers) >= maxCachedProducers {
		m.producersAll = false
		return
	}
	next := make(map[string]driver.Producer, len(m.producers)+1)
	for k, v := range m.producers {
		next[k] = v
	}
	next[id] = p
	m.producers = next
}

// Tx is the handle a write function gets. It is valid only during the function's call.
type Tx struct {
	s       *Store
	g       *group
	ctx     context.Context
	now     time.Time // the clock when the write began running (not when its group began)
	spSet   bool
	staged  map[string]*StreamState // nil value: the stream was deleted by this function
	touched map[int64]string
	marks   map[int64]bool
	hooks   []func()
	db      lazyTx
	// eph holds, on a shared database, the ephemeral events this function appended per stream:
	// they travel with the commit's notification to the other nodes.
	eph map[int64][]foldtype.Event
	// recs holds, on a shared database, the durable records this function appended per stream:
	// they travel with the commit's notification and feed the tail cache (tailcache.go).
	recs map[int64][]driver.Record
	// holding is the hold whose stream this function may write; holdStart and holdEnds are the
	// holds it starts and ends (hold.go), applied once the group commits.
	holding   *Hold
	holdStart *Hold
	holdEnds  []*Hold
	// aloneErr is the error of a statement run without a savepoint (tx.beginAlone): the group's
	// transaction may be partly written or rolled back by the database, so the group fails.
	aloneErr error
	// quiet is ctx without its cancellation (see stmtCtx), made on first use.
	quiet context.Context
}

// StatementContext is the context a statement of the function runs with, given the one its caller passed:
// the function's context without its cancellation. A caller that goes away is noticed before its
// function starts (building.add) and between the statements of a long one (the record loops check
// t.ctx), but never interrupts a statement, because a statement belongs to its whole group: SQLite
// may roll the group's transaction back after an interrupted write, and on PostgreSQL the group's
// statements are queued on one connection, where one cancelled statement refuses the whole group —
// either way the group's other writes would fail with it. (The driver also watches a cancellable
// context with a goroutine per statement.) How long a statement may take is the driver's write
// deadline (docs/postgres.md#bounded-waits), never the caller's.
func (t *Tx) StatementContext(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	if ctx != t.ctx {
		return context.WithoutCancel(ctx)
	}
	if t.quiet == nil {
		t.quiet = context.WithoutCancel(ctx)
	}
	return t.quiet
}

// lockEpochOf is dtx's driver.LockKeeper epoch (0 when it has none, or no transaction began).
func lockEpochOf(dtx driver.WriteTx) int {
	if lk, ok := dtx.(driver.LockKeeper); ok {
		return lk.LockEpoch()
	}
	return 0
}

func (t *Tx) run(fn func(t *Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("stream store: write panicked: %v", p)
		}
	}()
	return fn(t)
}

// Begin makes sure the group's transaction and this function's savepoint exist. Nothing runs in
// the database until a write function first needs it, so a write that needs no SQL (an
// ephemeral-only batch) costs no transaction.
func (t *Tx) Begin() (driver.WriteTx, error) {
	ctx := context.Background()
	if t.g.dtx == nil {
		dtx, err := t.g.w.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream store: begin: %w", err)
		}
		t.g.dtx = dtx
		t.s.began(t.g, dtx)
	}
	if !t.spSet {
		if err := t.g.dtx.Savepoint(ctx); err != nil {
			return nil, fmt.Errorf("stream store: savepoint: %w", err)
		}
		t.spSet = true
	}
	return t.g.dtx, nil
}

// beginAlone makes sure the group's transaction exists, for a function whose next statement is
// its only one: that statement runs without a savepoint of its own (one statement is atomic by
// itself), saving the savepoint and its release. If it fails the function reports it through
// aloneErr and the whole group fails (the database may have rolled the transaction back). It
// returns false when the function already has a savepoint: the statement then runs inside it.
func (t *Tx) beginAlone() (driver.WriteTx, bool, error) {
	if t.spSet {
		return t.g.dtx, false, nil
	}
	if t.g.dtx == nil {
		dtx, err := t.g.w.Begin(context.Background())
		if err != nil {
			return nil, false, fmt.Errorf("stream store: begin: %w", err)
		}
		t.g.dtx = dtx
		t.s.began(t.g, dtx)
	}
	return t.g.dtx, true, nil
}

// Now is the group's commit time.
func (t *Tx) Now() time.Time { return t.now }

// Context is the context of the write's caller: a write function checks it between the
// statements of a long write (a caller that went away stops it), and passes it to the driver's
// calls, which run without its cancellation (StatementContext).
func (t *Tx) Context() context.Context { return t.ctx }

// Driver is the driver's write transaction as the write function sees it: each call begins the
// group's transaction and the function's savepoint when no statement did yet (lazytx.go).
func (t *Tx) Driver() driver.Tx { return t.db }

// AddEphemerals notes, on a shared database, ephemeral events this function appended to the
// stream with id: they travel with the commit's notification to the other nodes, which hand them
// to their subscribers (the events are never stored).
func (t *Tx) AddEphemerals(id int64, evs []foldtype.Event) {
	if t.eph == nil {
		t.eph = make(map[int64][]foldtype.Event)
	}
	t.eph[id] = append(t.eph[id], evs...)
}

// Holding returns the hold whose stream this write function may write (hold.go), or nil.
func (t *Tx) Holding() *Hold { return t.holding }

// AfterCommit registers f to run on the writer goroutine after the group commits, before the
// caller is answered. Hooks must not block and must not call write.
func (t *Tx) AfterCommit(f func()) { t.hooks = append(t.hooks, f) }

// addRecord notes a durable record this function appended: on a shared database it travels with
// the commit's notification, and it feeds the tail cache (on an exclusive driver only while the
// cache has entries). rec's memory must not change afterwards.
func (t *Tx) addRecord(rec driver.Record) {
	if !t.wantRecords() {
		return
	}
	if t.recs == nil {
		t.recs = make(map[int64][]driver.Record)
	}
	rec.Keys = nil
	t.recs[rec.StreamID] = append(t.recs[rec.StreamID], rec)
}

// wantRecords reports whether addRecord keeps what it is given.
func (t *Tx) wantRecords() bool { return !t.s.exclusive || t.s.tails.inUse() }

// Changed marks the stream as changed, so readers waiting on it wake after the commit (and other
// processes sharing the database are notified).
func (t *Tx) Changed(id int64, path string) { t.touched[id] = path }

// Stream returns a staged copy of the writer's state of the stream at path, loading it from the
// database when the writer has none (or when the database is shared: then under the stream's
// lock, so the tail is current). Changes to the copy take effect only if this function and the
// group commit. It returns errNoStream when there is no row.
func (t *Tx) Stream(path string) (*StreamState, error) {
	if err := t.checkHeld(path); err != nil {
		return nil, err
	}
	if t.g.busy[path] || t.g.deferred[path] {
		// Later writes of the group to the stream wait too, even once it is free again: they
		// must not overtake this one.
		if t.g.deferred == nil {
			t.g.deferred = make(map[string]bool)
		}
		t.g.deferred[path] = true
		if h := t.s.heldBack; h != nil {
			h(path)
		}
		return nil, errInflight
	}
	if m, ok := t.staged[path]; ok {
		if m != nil {
			return m, nil
		}
	} else if m, ok := t.g.staged[path]; ok && !t.lockReleased(m) {
		if m != nil {
			if !t.s.exclusive {
				// No round trip: the group holds the lock; this function now relies on it.
				if err := t.db.LockStream(t.ctx, m.Row.ID); err != nil {
					return nil, err
				}
			}
			c := *m
			t.staged[path] = &c
			return &c, nil
		}
	} else if m, ok := t.s.ws.streams.get(path); ok && t.s.exclusive {
		c := *m
		t.staged[path] = &c
		return &c, nil
	}
	if m, ok := t.expected(path); ok {
		return m, nil
	}
	row, err := t.db.StreamByPath(t.ctx, path)
	if err != nil {
		if err == driver.ErrNoStream {
			return nil, errNoStream
		}
		return nil, err
	}
	m := &StreamState{Row: row, HighestAssigned: row.Tail, Tail: row.Tail}
	if !t.s.exclusive {
		if err := t.db.LockStream(t.ctx, row.ID); err != nil {
			return nil, err
		}
		if row, err = t.db.StreamByID(t.ctx, row.ID); err != nil {
			if err == driver.ErrNoStream {
				return nil, errNoStream
			}
			return nil, err
		}
		m = &StreamState{Row: row, HighestAssigned: max(row.Tail, row.Highest), Tail: row.Tail}
		if old, ok := t.s.ws.streams.get(path); ok && old.Row.ID == row.ID {
			m.HighestAssigned = max(m.HighestAssigned, old.HighestAssigned)
		}
		if old := t.g.staged[path]; old != nil && old.Row.ID == row.ID {
			m.HighestAssigned = max(m.HighestAssigned, old.HighestAssigned)
		}
		m.epoch = t.lockEpoch()
	}
	t.staged[path] = m
	return m, nil
}

// expected stages a copy of the writer's entry of the stream at path when the function may rely on
// it (Store.expected) and the stream is not in the group yet: the check of its row is queued in the
// group's transaction instead of a round trip to read the row
// (docs/postgres.md#writes-round-trips). The copy caches no producer: their rows are read in the
// transaction, after the check took the stream's lock.
func (t *Tx) expected(path string) (*StreamState, bool) {
	if _, ok := t.staged[path]; ok {
		return nil, false
	}
	if _, ok := t.g.staged[path]; ok {
		return nil, false
	}
	m, ok := t.s.expected(path)
	if !ok {
		return nil, false
	}
	d, err := t.Begin()
	if err != nil {
		return nil, false // the usual read meets the same failure
	}
	e, ok := d.(driver.StreamExpecter)
	if !ok {
		return nil, false
	}
	want := m.Row
	want.Tail = m.Tail
	if err := e.ExpectStream(t.ctx, want, m.HighestAssigned); err != nil {
		return nil, false
	}
	c := *m
	c.producers, c.producersAll = nil, false
	c.epoch = t.lockEpoch()
	t.staged[path] = &c
	return &c, true
}

// Unheld reports whether the writer holds nothing of the stream at path in memory — no staged
// change of this function or its group, no cached row (exclusive drivers only) and no
// hold: whether it exists is then for the database to say.
func (t *Tx) Unheld(path string) bool {
	if !t.s.exclusive || t.heldBy(path) != nil {
		return false
	}
	if _, ok := t.staged[path]; ok {
		return false
	}
	if _, ok := t.g.staged[path]; ok {
		return false
	}
	_, ok := t.s.ws.streams.get(path)
	return !ok
}

// lockReleased reports whether m, a row an earlier function of the group read under its stream's
// lock, lost that lock since (a shared driver committed the earlier functions early, see
// driver.LockKeeper): then it must be read again under the lock, even if the group took the lock
// again meanwhile.
func (t *Tx) lockReleased(m *StreamState) bool {
	return m != nil && !t.s.exclusive && m.epoch != t.lockEpoch()
}

// lockEpoch is the group transaction's driver.LockKeeper epoch (0 when it has none).
func (t *Tx) lockEpoch() int { return lockEpochOf(t.g.dtx) }

// Create records a stream created by this function. On an exclusive driver its entry knows every
// producer of the stream from the start: none (see StreamState.producersAll).
func (t *Tx) Create(m *StreamState) {
	m.producersAll = t.s.exclusive
	m.epoch = t.lockEpoch()
	t.staged[m.Row.Path] = m
	t.Changed(m.Row.ID, m.Row.Path)
}

// Forget drops the stream at path from the writer's state after the commit (it was deleted).
func (t *Tx) Forget(path string, id int64) {
	t.staged[path] = nil
	t.Changed(id, path)
}

// Marked reports whether the stream is marked in this incarnation: committed, or staged earlier in
// this function or by a successful function earlier in the group. A mark is one bit per stream for
// the life of the store's incarnation (markSet), for a layer's "at most once per incarnation"
// (wake.go: a stream gets at most one wake record).
func (t *Tx) Marked(id int64) bool {
	return t.marks[id] || t.g.marks[id] || t.s.ws.marks.has(id)
}

// Mark stages the stream's mark. It takes effect only if this function and the group commit: a
// mark that outlived a rolled-back write would suppress what it stands for (a wake record) for the
// rest of the incarnation.
func (t *Tx) Mark(id int64) {
	if t.marks == nil {
		t.marks = make(map[int64]bool)
	}
	t.marks[id] = true
}

// CachedStream returns the writer's committed entry of the stream at path, if it is cached: a
// hold's owner checks with it that its stream is still there.
func (t *Tx) CachedStream(path string) (*StreamState, bool) { return t.s.ws.streams.get(path) }
