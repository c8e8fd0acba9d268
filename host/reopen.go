package host

import (
	"context"
	"slices"
	"sync"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Reopening an engine (docs/store.md#engines-of-a-pattern) reads what it needs in as few reads of
// the database as it can: on an exclusive database one read, after subscribing, of the stream's
// row, the engine's checkpoint and work-started marker and the events after the checkpoint (for
// an engine opened to work run in the store's writer, on its warm connection: Events.ReadOpening
// with ForWork); on a shared one the stream's row before the lease, the two checkpoint rows together under it, and the
// events after the checkpoint in its catch-up.

// preloadedRows are checkpoint rows read together for one engine being built: each is answered
// once, then forgotten (a write forgets it at once), so the engine sees every later change.
type preloadedRows struct {
	mu   sync.Mutex
	rows map[string]preloadedRow
}

type preloadedRow struct {
	cp    foldtype.Checkpoint
	found bool
}

// engineRows are the checkpoint rows an engine of processor slug reads when it is built: its
// checkpoint and its work-started marker.
func engineRows(slug string) []string {
	return []string{slug, foldstream.WorkStartedRow(slug)}
}

// preloaded holds the rows of slugs as read (a slug missing from read: no row).
func preloaded(read map[string]foldtype.Checkpoint, slugs []string) *preloadedRows {
	r := &preloadedRows{rows: make(map[string]preloadedRow, len(slugs))}
	for _, slug := range slugs {
		cp, ok := read[slug]
		r.rows[slug] = preloadedRow{cp: cp, found: ok}
	}
	return r
}

// take returns slug's preloaded row and forgets it.
func (r *preloadedRows) take(slug string) (preloadedRow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[slug]
	delete(r.rows, slug)
	return row, ok
}

func (r *preloadedRows) forget(slug string) {
	r.mu.Lock()
	delete(r.rows, slug)
	r.mu.Unlock()
}

// forgetAll forgets every row not taken yet: once the engine is built, its reads go to the store.
func (r *preloadedRows) forgetAll() {
	r.mu.Lock()
	clear(r.rows)
	r.mu.Unlock()
}

// preloadedCheckpoints is a checkpoint storage whose reads answer from rows first.
type preloadedCheckpoints struct {
	foldtype.CheckpointStorage
	rows *preloadedRows
}

func (p preloadedCheckpoints) ReadCheckpoint(ctx context.Context, slug string) (foldtype.Checkpoint, bool, error) {
	if row, ok := p.rows.take(slug); ok {
		return row.cp, row.found, nil
	}
	return p.CheckpointStorage.ReadCheckpoint(ctx, slug)
}

func (p preloadedCheckpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	p.rows.forget(slug)
	return p.CheckpointStorage.WriteCheckpoint(ctx, slug, cp, stateChanged)
}

// preread is what an opening read before building the engine: the stream, the engine's
// checkpoint rows (nil: not read) and the first page of its catch-up (nil: none).
type preread struct {
	info  stream.StreamInfo
	rows  map[string]foldtype.Checkpoint
	first *firstPage
}

// firstPage is the first page of an engine's catch-up, read with its stream and checkpoint after
// the engine was subscribed: its first read of the log at that offset gets it (a read at any
// moment after subscribing is as good as another), once; the host drops it when the opening
// catch-up ended, so no later read gets an old page.
type firstPage struct {
	mu    sync.Mutex
	page  *foldtype.ReadPage
	after int64
	limit int
}

// take returns the page when a read after after with limit may have it, and forgets it.
func (f *firstPage) take(after int64, limit int) (foldtype.ReadPage, bool) {
	if f == nil {
		return foldtype.ReadPage{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.page == nil || after != f.after || limit != f.limit {
		return foldtype.ReadPage{}, false
	}
	p := *f.page
	f.page = nil
	return p, true
}

// drop forgets the page.
func (f *firstPage) drop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.page = nil
	f.mu.Unlock()
}

// openExclusive is the first part of opening sl on an exclusive database (SQLite): its leases
// live in this process, so it takes the lease first; it wakes the stream when this host has not
// yet, subscribes the engine (its pushes wait behind the returned gate until the slot is
// published), and then reads the stream, the engine's checkpoint rows and the events after the
// checkpoint in one read (for work, in the store's writer), from which it builds the engine. A stream this host woke
// under another id (deleted and created again since) is woken after the read: its wake record then
// comes as a push. On failure it calls fail (releasing what it took) and reports !ok.
func (h *Host) openExclusive(ctx context.Context, sl *slot, mode openMode, fail func(error), held *bool) (
	info stream.StreamInfo, pre preread, runner foldtype.Runner, sub *stream.Subscription, gate chan struct{}, ok bool) {
	reg := sl.reg
	l, err := h.leases.acquire(ctx, sl.key, sl.force)
	if err != nil {
		fail(err)
		return
	}
	sl.lease, *held = l, true
	if !reg.pinned() {
		h.makeRoom(ctx)
	}
	wokeID, remembered := h.woken.idOf(sl.key.path)
	woke := mode == openForWork && !remembered // the opening read wakes the stream
	gate = make(chan struct{})
	var deliver stream.DeliverFunc
	// covered is the offset through which the opening page, read at head, holds every durable
	// event: the push of the wake record the opening read appended, and of any commit the page
	// holds, is already processed and dropped (0: nothing dropped). Set before the gate opens.
	var covered int64
	sub, err = h.store.Events().Subscribe(sl.key.path, gated(gate, func(ctx context.Context, events []foldtype.Event, rg foldtype.ScannedRange) error {
		if rg.After <= rg.Through && rg.Through <= covered &&
			!slices.ContainsFunc(events, func(ev foldtype.Event) bool { return ev.Ephemeral || ev.Offset <= rg.After }) {
			return nil // a range running backwards is a stream created again: deliverTo sees to it
		}
		return deliver(ctx, events, rg)
	}), stream.SubscribeOptions{
		Consumes:         reg.consumes,
		MaxPendingEvents: h.cfg.MaxPendingEvents,
		Name:             reg.slug,
		Logger:           h.log,
	})
	if err != nil {
		fail(err)
		return
	}
	failSub := func(err error) {
		sub.Close()
		fail(err)
	}
	// An opening for work reads in the writer, on its warm connection, appending the wake record
	// first when this host has not woken the stream (one write); one for a read commits nothing.
	req := stream.OpeningRequest{Path: sl.key.path, Slugs: engineRows(reg.slug), Limit: foldstream.EnginePageSize,
		ForWork: mode == openForWork, After: func(rows map[string]foldtype.Checkpoint) int64 {
			cp, found := rows[reg.slug]
			switch {
			case !found:
				return 0
			case reg.atVersion(cp.ReducerVersion) == nil:
				return -1 // the engine re-reduces first: its reads start elsewhere
			default:
				return cp.ReducedThroughOffset
			}
		}}
	if woke {
		req.Wake = stream.WakeRequest
	}
	o, err := h.store.Events().ReadOpening(ctx, req)
	if err != nil {
		failSub(err)
		return
	}
	info = o.Info
	pre = preread{info: info, rows: o.Checkpoints}
	if o.HasPage {
		pre.first = &firstPage{page: &o.Page, after: o.After, limit: foldstream.EnginePageSize}
		if woke && o.Page.AtHead {
			covered = o.Page.ScannedThroughOffset
		}
	}
	switch {
	case mode == openForWork && woke:
		if !info.Closed {
			h.markWoken(sl.key.path, info.ID())
		}
	case mode == openForWork && wokeID != info.ID():
		if err := h.wakeOnce(ctx, sl.key.path, info, stream.WakeRequest); err != nil {
			failSub(err)
			return
		}
	case mode == openForRead:
		sl.needWake.Store(!info.Closed)
	}
	sl.streamID = info.ID()
	if runner, err = reg.build(sl.key.path, pre, l); err != nil {
		failSub(err)
		return
	}
	deliver = h.deliverTo(sl, runner)
	return info, pre, runner, sub, gate, true
}

// gated holds each push until gate is closed (the slot was published: its engine is open and
// reported as this node's, under its lease) and drops it when the subscription closes first.
func gated(gate <-chan struct{}, deliver stream.DeliverFunc) stream.DeliverFunc {
	return func(ctx context.Context, events []foldtype.Event, rg foldtype.ScannedRange) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil // closed before the slot was published
		}
		return deliver(ctx, events, rg)
	}
}
