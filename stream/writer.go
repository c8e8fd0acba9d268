package stream

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"time"
)

// The writer: the store's one concurrency rule for writes lives here.
//
// Every write is a function queued on s.writes. The writer goroutine takes the first queued
// function, drains whatever else is already queued (up to Options.MaxGroup), and runs the group
// in one transaction: each function inside its own SAVEPOINT, so a function that fails (a refused
// batch, a conflict) rolls back alone and its neighbours still commit. One COMMIT — one fsync
// with synchronous=FULL — acknowledges the whole group (group commit). After the commit the
// writer applies the functions' staged in-memory changes, runs their AfterCommit hooks in queue
// order (fan-out to subscribers, waking readers) and only then answers the callers, so a caller
// that got its answer can read its own write.
//
// The writer goroutine is the only one that touches s.mem (offset assignment state), so offsets
// of a stream are assigned without a per-stream lock and two appends to the same stream can share
// one group commit.

type writeReq struct {
	ctx  context.Context
	fn   func(tx *Tx) error
	done chan error
}

// streamMem is the writer-owned in-memory state of one stream.
type streamMem struct {
	// HighestAssigned is the highest offset handed out in this incarnation, ephemerals included.
	HighestAssigned int64
	// Tail is the durable mark: the highest committed durable offset (or byte position).
	Tail int64
}

// Tx is the handle a write function gets. It is valid only during the function's call.
type Tx struct {
	s       *Store
	g       *group
	ctx     context.Context
	now     time.Time
	spName  string
	spSet   bool
	staged  map[int64]*streamMem
	touched map[int64]bool
	woken   map[int64]bool // wake marks staged by this function (see markWoken)
	hooks   []func()
}

type group struct {
	conn   *sql.Conn
	stmts  *stmtCache
	began  bool
	staged map[int64]*streamMem
	woken  map[int64]bool // wake marks of the group's successful functions, applied after COMMIT
	seq    int
}

// stmtCache keeps the writer connection's prepared statements: SQLite's parser is a large share of
// a small write's cost, and the writer runs the same few statements over and over. Writer-owned.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

const maxCachedStmts = 512

func (c *stmtCache) exec(query string, args ...any) (sql.Result, error) {
	if st := c.get(query); st != nil {
		return st.ExecContext(context.Background(), args...)
	}
	return c.conn.ExecContext(context.Background(), query, args...)
}

func (c *stmtCache) query(query string, args ...any) (*sql.Rows, error) {
	if st := c.get(query); st != nil {
		return st.QueryContext(context.Background(), args...)
	}
	return c.conn.QueryContext(context.Background(), query, args...)
}

func (c *stmtCache) queryRow(query string, args ...any) *sql.Row {
	if st := c.get(query); st != nil {
		return st.QueryRowContext(context.Background(), args...)
	}
	return c.conn.QueryRowContext(context.Background(), query, args...)
}

// get returns the prepared statement for query, or nil when it cannot be cached (the cache is
// full, or preparing failed: the caller then runs the query directly and sees the error).
func (c *stmtCache) get(query string) *sql.Stmt {
	if st, ok := c.stmts[query]; ok {
		return st
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil
	}
	st, err := c.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil
	}
	c.stmts[query] = st
	return st
}

func (c *stmtCache) close() {
	for _, st := range c.stmts {
		st.Close()
	}
}

// write queues fn on the writer and waits for its outcome. fn runs at most once; if ctx ends
// before the writer reaches it, it does not run and ctx's error is returned. Once fn has run, write
// waits for the commit even if ctx ends meanwhile, so the caller never mistakes a committed write
// for a failed one.
func (s *Store) write(ctx context.Context, fn func(tx *Tx) error) error {
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	if err := s.enqueue(ctx, r); err != nil {
		return err
	}
	// A full disk fails a write with INSUFFICIENT_STORAGE: nothing of it was committed.
	return classifyStorageErr(<-r.done)
}

func (s *Store) enqueue(ctx context.Context, r *writeReq) (err error) {
	if s.closed.Load() {
		return ErrStoreClosed
	}
	defer func() {
		// Close closed the channel between our check and the send.
		if recover() != nil {
			err = ErrStoreClosed
		}
	}()
	select {
	case s.writes <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) runWriter(conn *sql.Conn) {
	defer s.writerWG.Done()
	defer conn.Close()
	stmts := &stmtCache{conn: conn, stmts: make(map[string]*sql.Stmt)}
	defer stmts.close()
	batch := make([]*writeReq, 0, s.opts.MaxGroup)
	lastGroup := 0
	for first := range s.writes {
		batch = append(batch[:0], first)
		// When the last group had company, callers it just answered are probably about to queue
		// again: yield a few times before closing the group so they share its commit (one fsync)
		// instead of each paying for a nearly empty one.
		yields := 0
		if lastGroup > 1 {
			yields = 8
		}
	drain:
		for len(batch) < s.opts.MaxGroup {
			select {
			case r, ok := <-s.writes:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				if yields == 0 {
					break drain
				}
				yields--
				runtime.Gosched()
			}
		}
		lastGroup = len(batch)
		s.runGroup(conn, stmts, batch)
	}
}

func (s *Store) runGroup(conn *sql.Conn, stmts *stmtCache, reqs []*writeReq) {
	ctx := context.Background()
	g := &group{conn: conn, stmts: stmts, staged: make(map[int64]*streamMem)}
	results := make([]error, len(reqs))
	hooks := make([][]func(), len(reqs))
	touched := make(map[int64]bool)
	now := s.clock.Now()
	broken := error(nil)

	for i, r := range reqs {
		if broken != nil {
			results[i] = broken
			continue
		}
		if err := r.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		g.seq++
		// One savepoint name serves every function: each savepoint is released (after a rollback
		// to it when the function failed) before the next function starts, and a constant name
		// keeps the savepoint statements prepared.
		tx := &Tx{s: s, g: g, ctx: r.ctx, now: now, spName: "w",
			staged: make(map[int64]*streamMem), touched: make(map[int64]bool)}
		err := tx.run(r.fn)
		if tx.spSet {
			if err != nil {
				if _, rbErr := stmts.exec("ROLLBACK TO " + tx.spName); rbErr != nil {
					// SQLite rolls the whole transaction back by itself after some errors (a full
					// disk): keep that cause beside the rollback's own failure.
					broken = fmt.Errorf("stream store: roll back a refused write: %w (after: %w)", rbErr, err)
				}
			}
			if _, relErr := stmts.exec("RELEASE " + tx.spName); relErr != nil && broken == nil {
				broken = fmt.Errorf("stream store: release savepoint: %w", relErr)
			}
		}
		if err != nil {
			results[i] = err
			continue
		}
		for id, m := range tx.staged {
			g.staged[id] = m
		}
		for id := range tx.touched {
			touched[id] = true
		}
		for id := range tx.woken {
			if g.woken == nil {
				g.woken = make(map[int64]bool)
			}
			g.woken[id] = true
		}
		hooks[i] = tx.hooks
	}

	if g.began {
		var commitErr error
		if broken != nil {
			commitErr = broken
		} else if _, err := stmts.exec("COMMIT"); err != nil {
			commitErr = fmt.Errorf("stream store: commit: %w", err)
		} else {
			s.commits.Add(1)
		}
		if commitErr != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			for i := range reqs {
				if results[i] == nil {
					results[i] = commitErr
				}
				hooks[i] = nil
			}
			g.staged = nil
			g.woken = nil
			touched = nil
		}
	}

	for id, m := range g.staged {
		if m == nil {
			delete(s.mem, id)
			continue
		}
		s.mem[id] = m
	}
	// Before the hooks: a delete later in the group forgets the mark in its own hook.
	for id := range g.woken {
		s.ev.woken[id] = true
	}
	for i := range reqs {
		for _, h := range hooks[i] {
			h()
		}
	}
	for id := range touched {
		s.wake(id)
	}
	for i, r := range reqs {
		r.done <- results[i]
	}
}

func (t *Tx) run(fn func(tx *Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("stream store: write panicked: %v", p)
		}
	}()
	return fn(t)
}

// begin makes sure the group's transaction and this function's savepoint exist.
func (t *Tx) begin() error {
	if !t.g.began {
		if _, err := t.g.stmts.exec("BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("stream store: begin: %w", err)
		}
		t.g.began = true
	}
	if !t.spSet {
		if _, err := t.g.stmts.exec("SAVEPOINT " + t.spName); err != nil {
			return fmt.Errorf("stream store: savepoint: %w", err)
		}
		t.spSet = true
		t.s.savepoints.Add(1)
	}
	return nil
}

// Exec runs a statement inside the group transaction.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	return t.g.stmts.exec(query, args...)
}

// Query runs a query inside the group transaction.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	return t.g.stmts.query(query, args...)
}

// QueryRow runs a one-row query inside the group transaction. A failure to begin is reported by
// the returned row's Scan.
func (t *Tx) QueryRow(query string, args ...any) *sql.Row {
	if err := t.begin(); err != nil {
		// Route the error through a query that fails the same way on Scan.
		return t.g.conn.QueryRowContext(canceledCtx, "SELECT 1")
	}
	return t.g.stmts.queryRow(query, args...)
}

var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Context returns the caller's context (for values; the write itself is not cancelled midway).
func (t *Tx) Context() context.Context { return t.ctx }

// Now is the group's commit time.
func (t *Tx) Now() time.Time { return t.now }

// AfterCommit registers f to run on the writer goroutine after the group commits, before the
// caller is answered. Hooks must not block and must not call write.
func (t *Tx) AfterCommit(f func()) { t.hooks = append(t.hooks, f) }

// Touch marks the stream as changed, so readers waiting on it wake after the commit.
func (t *Tx) Touch(streamID int64) { t.touched[streamID] = true }

// Mem returns a staged copy of the stream's in-memory state, loading it with load when the writer
// has none yet. Changes to the copy take effect only if this function and the group commit. It
// also marks the stream touched.
func (t *Tx) Mem(streamID int64, load func() (streamMem, error)) (*streamMem, error) {
	t.touched[streamID] = true
	if m, ok := t.staged[streamID]; ok {
		if m != nil {
			return m, nil
		}
		// Forgotten earlier in this function: load afresh, never from s.mem.
	} else if m, ok := t.g.staged[streamID]; ok {
		// A nil entry means "forgotten earlier in this group": load afresh.
		if m != nil {
			c := *m
			t.staged[streamID] = &c
			return &c, nil
		}
	} else if m, ok := t.s.mem[streamID]; ok {
		c := *m
		t.staged[streamID] = &c
		return &c, nil
	}
	loaded, err := load()
	if err != nil {
		return nil, err
	}
	t.staged[streamID] = &loaded
	return &loaded, nil
}

// isWoken reports whether the stream got its wake record in this incarnation: committed, or
// staged earlier in this function or by a successful function earlier in the group.
func (t *Tx) isWoken(streamID int64) bool {
	return t.woken[streamID] || t.g.woken[streamID] || t.s.ev.woken[streamID]
}

// markWoken stages the stream's wake mark. Like Mem, it takes effect only if this function and
// the group commit: a mark that outlived a rolled-back wake record would suppress the record for
// the rest of the incarnation (and alias the next stream handed the rolled-back id).
func (t *Tx) markWoken(streamID int64) {
	if t.woken == nil {
		t.woken = make(map[int64]bool)
	}
	t.woken[streamID] = true
}

// ForgetMem drops the stream's in-memory state after the commit (the stream was deleted).
func (t *Tx) ForgetMem(streamID int64) {
	t.touched[streamID] = true
	t.staged[streamID] = nil
}
