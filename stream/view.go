package stream

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// EventStream is the event view of one stream path: the [foldtype.Stream] an engine runs
// against. Bind it to a processor with ForProcessor so Claim knows whose claim it is.
type EventStream struct {
	s     *Store
	path  string
	slug  string
	fence *driver.Fence
}

// Stream returns the event view of the stream at path. The stream is created by its first append.
func (e *Events) Stream(path string) *EventStream { return &EventStream{s: e.s, path: path} }

// ForProcessor returns the view bound to processor slug: its Claim records that processor's claim.
func (e *EventStream) ForProcessor(slug string) *EventStream {
	c := *e
	c.slug = slug
	return &c
}

// Fenced returns a copy whose appends of durable events succeed only while the lease key is
// still held at generation, checked inside the append's transaction as a fenced checkpoint write
// is ([Checkpoints.Fenced]): once the lease moved on, such an append fails with LEASE_LOST and
// writes nothing. A batch of ephemerals alone is not checked (it writes nothing durable).
func (e *EventStream) Fenced(key string, generation int64) *EventStream {
	c := *e
	c.fence = &driver.Fence{Key: key, Generation: generation}
	return &c
}

// Path returns the stream path.
func (e *EventStream) Path() string { return e.path }

// Append commits events to the stream and returns the committed events in input order
// (docs/store.md#appending). On a view not bound to a processor it creates the stream (content
// type application/json) when it does not exist:
//
//   - an empty call is a no-op;
//   - every type must be non-empty after trimming ([foldtype.CodeInvalidEvent]);
//   - an idempotency key that names an existing event with the same body echoes it without a new
//     offset; a different body refuses the whole batch with [foldtype.CodeIdempotencyConflict];
//     a key repeated inside the batch yields one stored event;
//   - an input's Offset is a precondition; a mismatch refuses the whole batch with
//     [foldtype.CodeOffsetConflict];
//   - ephemeral events take an offset but write nothing; an ephemeral-only batch on a stream the
//     writer already knows runs no SQL;
//   - an ephemeral-only batch never creates a stream: to a missing stream it is dropped —
//     nothing is written or pushed, and the receipts carry offset 0;
//   - a body over [MaxEventBytes] refuses the batch with [foldtype.CodeEventTooLarge].
//
// A view bound with ForProcessor never creates its stream: a processor's appends to a stream that
// is missing or was deleted fail with STREAM_NOT_FOUND or STREAM_GONE, so an engine still running
// on a deleted stream cannot bring the path back (docs/store.md#deleting-a-stream); its
// ephemeral-only batches (live-state deltas) to a missing, deleted or closed stream are dropped
// (receipts at offset 0), as nobody can follow them.
//
// The batch commits atomically with whatever else the writer grouped with it; Append returns after
// the commit, by which time every subscriber's push for it is queued.
func (e *EventStream) Append(ctx context.Context, events ...foldtype.EventInput) ([]foldtype.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	events = foldtype.StampOrigin(e.path, events) // docs/engine.md#cause-chains: a source without an origin gets the path
	prepared, err := prepareInputs(events)
	if err != nil {
		return nil, err
	}
	bound := e.slug != ""
	return e.s.appendEventsAt(ctx, e.path, events, prepared, !bound, bound, e.fence)
}

// Read returns durable events of the stream with offset > after, in offset order
// (docs/store.md#reading). limit is clamped to [1, MaxReadLimit]; a limit <= 0 means
// DefaultReadLimit. The page stops before the event that would take it over ReadBudgetBytes.
// AtHead = not budget-cut and (fewer rows than limit or the last row reached the durable mark);
// ScannedThroughOffset is the durable mark on an at-head page, else the last row's offset, and
// never less than after — the proof never passes the durable mark. A missing stream reads as
// empty and at head.
func (e *EventStream) Read(ctx context.Context, after int64, limit int) (foldtype.ReadPage, error) {
	return e.s.readEvents(ctx, e.path, after, limit, readOptions{})
}

// Claim records the bound processor's claim (the zero time releases it); see [Events.Claim]. It
// fails on a view not bound with ForProcessor.
func (e *EventStream) Claim(ctx context.Context, at time.Time) error {
	if e.slug == "" {
		return errors.New("claim: the stream view is not bound to a processor (use ForProcessor)")
	}
	return e.s.Events().Claim(ctx, e.path, e.slug, at)
}

var _ foldtype.Stream = (*EventStream)(nil)

// Checkpoints is the checkpoint storage of the processors running on one stream: the driver's
// reduce_checkpoints rows scoped by the stream's path, read from committed data and written through
// the store's writer, so a checkpoint shares group commits with appends and is never ahead of
// the events it covers.
type Checkpoints struct {
	s     *Store
	scope string
	fence *driver.Fence
	// incarnation is the id of the stream these checkpoints belong to (0 until known), shared by
	// copies: a write for a stream that was deleted meanwhile is refused (see WriteCheckpoint).
	incarnation *atomic.Int64
}

var _ foldtype.CheckpointStorage = (*Checkpoints)(nil)

// Checkpoints returns the checkpoint storage of the processors running on the stream at path. It
// belongs to the stream's current incarnation (the stream existing now, or else the first one a
// write finds): once that stream is deleted, writes fail with STREAM_DELETED (not retryable) and
// write nothing, so a processor still running on the deleted stream cannot leave a checkpoint for
// a stream created at the path again (docs/store.md#deleting-a-stream).
func (e *Events) Checkpoints(ctx context.Context, path string) (*Checkpoints, error) {
	s := e.s
	if s.k.Closed() {
		return nil, ErrStoreClosed
	}
	c := &Checkpoints{s: s, scope: path, incarnation: new(atomic.Int64)}
	err := s.k.Read(ctx, func(q driver.Reader) error {
		row, err := q.StreamByPath(ctx, path)
		if err == nil && row.State == 0 {
			c.incarnation.Store(row.ID)
		} else if err != nil && !errors.Is(err, driver.ErrNoStream) {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// CheckpointsOf is Checkpoints for the stream info describes (as HeadStream returned it), bound
// to that stream without reading anything: an engine reopening on a stream it just looked up does
// not look it up again. A zero info (no stream known) gives checkpoints bound by the first write,
// as Checkpoints does for a missing stream.
func (e *Events) CheckpointsOf(info StreamInfo) (*Checkpoints, error) {
	s := e.s
	if s.k.Closed() {
		return nil, ErrStoreClosed
	}
	c := &Checkpoints{s: s, scope: info.Path, incarnation: new(atomic.Int64)}
	c.incarnation.Store(info.ID())
	return c, nil
}

// CheckpointsOfSlug reads processor slug's checkpoint row on each stream of paths (each as
// [Checkpoints.ReadCheckpoint] reads it) in one read transaction and one query, however many
// paths there are: the map holds the rows found, by path. A bulk verb checks a page of streams
// this way (docs/operations.md#bulk-verbs).
func (e *Events) CheckpointsOfSlug(ctx context.Context, slug string, paths []string) (map[string]foldtype.Checkpoint, error) {
	out := make(map[string]foldtype.Checkpoint, len(paths))
	if len(paths) == 0 {
		return out, nil
	}
	err := e.s.k.Read(ctx, func(q driver.Reader) error {
		return q.CheckpointsOfSlug(ctx, slug, paths, func(scope string, cp foldtype.Checkpoint) { out[scope] = cp })
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// OpeningRequest says what [Events.ReadOpening] reads for an engine being opened on a stream.
type OpeningRequest struct {
	// Path is the stream's path.
	Path string
	// Slugs names the checkpoint rows read with the stream (the engine's checkpoint and its
	// work-started marker; none for a head alone).
	Slugs []string
	// After, when set, asks for the first page of the engine's catch-up: the durable events
	// after the offset it returns for the rows found (negative: no page), at most Limit of them
	// (as EventStream.Read with Limit).
	After func(rows map[string]foldtype.Checkpoint) int64
	// Limit bounds the page (as EventStream.Read's limit).
	Limit int
	// ForWork opens an engine to work (for a commit, a due claim): it writes its checkpoint
	// next, so the read is as of the latest commit. On an exclusive database (SQLite) the read
	// then runs in the writer, as a function that writes nothing: the stream's row comes from the
	// writer's state and the checkpoint rows and the page from the writer's connection, whose page
	// cache holds what the writer just committed. A read transaction on its own connection would
	// start on an empty page cache (SQLite drops a connection's cache whenever the WAL changed,
	// and the writer commits all the time) and read the stream's path index, its row, its
	// checkpoints and its records again: folding over 100,000 streams, where each batch opens an
	// engine, that read was ~24 % of the CPU. The answer comes after the writer's group
	// committed, so it never holds what a failed group wrote. A function in the writer may make a
	// commit of its own (of nothing) when no other write shares its group, so an engine opened
	// for a read leaves ForWork unset: reads commit nothing
	// (docs/store.md#records-nobody-appended). On a shared database it changes nothing.
	ForWork bool
	// Wake, when not empty, wakes the stream first with this reason (WakeExisting), for an engine
	// that starts work on a stream its host has not woken yet (docs/store.md#wake-records); it
	// implies ForWork. On an exclusive database both run in one write of the writer: the wake
	// record (when the stream takes one) is appended and the opening read, in the same
	// transaction, includes it — one write instead of two. An engine subscribed before the call
	// is pushed the record as well, once the write commits; the page already holds it. On a
	// shared database it is the two calls.
	Wake string
}

// EngineOpening is what ReadOpening read, all in one read transaction.
type EngineOpening struct {
	// Info is the stream, as HeadStream returns it.
	Info StreamInfo
	// Checkpoints holds the checkpoint rows found.
	Checkpoints map[string]foldtype.Checkpoint
	// After and Page are the first page of the engine's catch-up: the durable events after After,
	// as EventStream.Read reads them. HasPage is false when no page was read.
	After   int64
	Page    foldtype.ReadPage
	HasPage bool
}

// ReadOpening reads what opening an engine on a stream needs, in one read of the database: the
// stream (as HeadStream), the checkpoint rows of req.Slugs and, when req.After asks for it, the
// first page of the engine's catch-up. A host that subscribed the engine first opens it with this
// one read: the stream, its checkpoint, and the events after it. A takeover's settle check reads
// the stream and the checkpoint alone (no After).
func (e *Events) ReadOpening(ctx context.Context, req OpeningRequest) (EngineOpening, error) {
	if req.ForWork || req.Wake != "" {
		return e.headForWork(ctx, req.Path, req.Wake, req.Slugs, req.After, req.Limit)
	}
	return e.readOpeningTx(ctx, req.Path, req.Slugs, req.After, req.Limit)
}

// readOpeningTx is ReadOpening in a read transaction of its own.
func (e *Events) readOpeningTx(ctx context.Context, path string, slugs []string, after func(rows map[string]foldtype.Checkpoint) int64, limit int) (EngineOpening, error) {
	s := e.s
	o := EngineOpening{Checkpoints: make(map[string]foldtype.Checkpoint, len(slugs))}
	err := s.k.Read(ctx, func(q driver.Reader) error {
		r, err := s.loadLive(ctx, q, path, s.clock.Now())
		if err != nil {
			return err
		}
		_, err = s.readOpening(ctx, q, path, r, nil, slugs, after, limit, &o) // the row just judged live
		return err
	})
	if err != nil {
		return EngineOpening{}, err
	}
	return o, nil
}

// headForWork is ReadOpening for work, waking the stream first when wake (a reason) is not empty.
func (e *Events) headForWork(ctx context.Context, path, wake string, slugs []string, after func(rows map[string]foldtype.Checkpoint) int64, limit int) (EngineOpening, error) {
	s := e.s
	if !s.exclusive {
		if wake != "" {
			if _, err := e.WakeExisting(ctx, path, wake); err != nil {
				return EngineOpening{}, err
			}
		}
		return e.readOpeningTx(ctx, path, slugs, after, limit)
	}
	o := EngineOpening{Checkpoints: make(map[string]foldtype.Checkpoint, len(slugs))}
	err := s.k.WriteTo(ctx, path, func(t *kernel.Tx) error {
		clear(o.Checkpoints) // a function may run again (a write that met a busy stream)
		o.After, o.Page, o.HasPage = 0, foldtype.ReadPage{}, false
		if wake != "" {
			if _, err := s.wakeIn(t, path, wake, false); err != nil {
				return err
			}
		}
		m, err := s.liveStream(t, path)
		if err != nil {
			return err
		}
		row := m.Row
		row.Tail = m.Tail
		read := slugs
		if s.noCheckpointsExt.Get(m) {
			read = nil // the stream has no checkpoint rows (checkpointsknown.go)
		}
		fromRecent, err := s.readOpening(t.Context(), t.Driver(), path, &row, s.recentExt.Get(m), read, after, limit, &o)
		if fromRecent {
			s.recentExt.Set(m, s.recentExt.Get(m).markedRead()) // staged, as m is: dropped sooner (recent.go)
		}
		return err
	})
	if err != nil {
		return EngineOpening{}, err
	}
	return o, nil
}

// readOpening fills o from the stream's row r, read through q: its info, the slugs' checkpoints
// and, when after asks for one, the page after the offset it returns — from recent, the writer's
// recent events of the stream (nil: none), when they hold the whole page (recent.go); fromRecent
// reports whether they did.
func (s *Store) readOpening(ctx context.Context, q driver.Reader, path string, r *driver.Stream, recent *recentEvents, slugs []string, after func(rows map[string]foldtype.Checkpoint) int64, limit int, o *EngineOpening) (fromRecent bool, err error) {
	o.Info = infoOf(r)
	if err := driver.ReadCheckpointRows(ctx, q, path, slugs, func(slug string, cp foldtype.Checkpoint) {
		o.Checkpoints[slug] = cp
	}); err != nil {
		return false, err
	}
	if after == nil {
		return false, nil
	}
	if o.After = after(o.Checkpoints); o.After < 0 {
		return false, nil
	}
	if page, ok := recent.page(r, o.After, limit, s.ev.readBudget); ok {
		o.Page, o.HasPage = page, true
		return true, nil
	}
	o.Page, _, err = s.readEventsIn(ctx, q, path, r, o.After, limit)
	o.HasPage = err == nil
	return false, err
}

// checkIncarnation refuses a checkpoint write once the stream the checkpoints belong to is gone
// (deleted, or replaced by a stream created at the path again), and binds still-unbound
// checkpoints to the stream the write finds.
func (c *Checkpoints) checkIncarnation(t *kernel.Tx, slug string) error {
	var row driver.Stream
	var found bool
	if c.s.exclusive {
		m, err := t.Stream(c.scope)
		if err != nil && !errors.Is(err, driver.ErrNoStream) {
			return err
		}
		if m != nil {
			row, found = m.Row, true
			c.s.noCheckpointsExt.Set(m, false) // staged: lost with the write if it fails
		} else {
			c.s.ls.wroteStreamless(c.scope)
		}
	} else {
		r, err := t.Driver().StreamByPath(t.Context(), c.scope)
		if err != nil && !errors.Is(err, driver.ErrNoStream) {
			return err
		}
		row, found = r, err == nil
	}
	want := c.incarnation.Load()
	if want == 0 {
		if found && row.State == 0 {
			c.incarnation.CompareAndSwap(0, row.ID)
		}
		return nil
	}
	if found && row.ID == want && row.State == 0 {
		return nil
	}
	e := foldtype.NewError(foldtype.CodeStreamDeleted, map[string]any{"path": c.scope, "slug": slug},
		"write checkpoint %q: stream %s was deleted; its checkpoints went with it and nothing was written", slug, quotePath(c.scope))
	e.Retryable = false
	return e
}

// Fenced returns a copy whose writes succeed only while the lease key is still held at
// generation (checked inside the write's transaction); a write after the lease moved on fails
// with LEASE_LOST and writes nothing.
func (c *Checkpoints) Fenced(key string, generation int64) *Checkpoints {
	d := *c
	d.fence = &driver.Fence{Key: key, Generation: generation}
	return &d
}

// ReadCheckpoint reads slug's row; an empty or NULL state reads as nil.
func (c *Checkpoints) ReadCheckpoint(ctx context.Context, slug string) (foldtype.Checkpoint, bool, error) {
	return driver.ReadCheckpoint(ctx, c.s.k.Read, c.scope, slug)
}

// ReadCheckpoints reads the rows of several slugs in one read transaction (each as ReadCheckpoint
// reads it): the map holds the rows found. Reopening an engine reads its checkpoint and its
// work-started marker this way, in one read of the database.
func (c *Checkpoints) ReadCheckpoints(ctx context.Context, slugs ...string) (map[string]foldtype.Checkpoint, error) {
	out := make(map[string]foldtype.Checkpoint, len(slugs))
	err := c.s.k.Read(ctx, func(q driver.Reader) error {
		for _, slug := range slugs {
			cp, ok, err := q.Checkpoint(ctx, c.scope, slug)
			if err != nil {
				return err
			}
			if ok {
				out[slug] = cp
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WriteCheckpoint upserts slug's row: version and cursor always, the state only when
// stateChanged. A state over [foldtype.MaxCheckpointChars] UTF-16 code units is refused before
// anything is written.
func (c *Checkpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	if err := driver.CheckCheckpointSize(slug, cp, stateChanged); err != nil {
		return err
	}
	return c.s.k.Write(ctx, func(t *kernel.Tx) error {
		if err := c.checkIncarnation(t, slug); err != nil {
			return err
		}
		return t.Driver().WriteCheckpoint(t.Context(), driver.CheckpointWrite{Scope: c.scope, Slug: slug, Checkpoint: cp,
			StateChanged: stateChanged, Fence: c.fence})
	})
}

// SwitchCheckpoint writes slug's row as cp (state included) and deletes row remove in one
// transaction, under the same fence and incarnation check as WriteCheckpoint: a rebuild's switch
// (docs/operations.md#rebuild-beside-the-running-version), after which either both happened or
// neither.
func (c *Checkpoints) SwitchCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, remove string) error {
	if err := driver.CheckCheckpointSize(slug, cp, true); err != nil {
		return err
	}
	return c.s.k.Write(ctx, func(t *kernel.Tx) error {
		if err := c.checkIncarnation(t, slug); err != nil {
			return err
		}
		return t.Driver().WriteCheckpoint(t.Context(), driver.CheckpointWrite{Scope: c.scope, Slug: slug, Checkpoint: cp,
			StateChanged: true, Fence: c.fence, Remove: []string{remove}})
	})
}
