package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// The processor state machine (docs/operations.md#the-state-machine): running, failing, paused
// and parked. Running and failing are the engine's (host/failing.go); paused is an operator's (or
// the failure policy's) and lives in the database, so it holds across restarts, lease moves and
// node deaths: the node that opens a processor reads its row after taking the lease and, when it
// says paused, opens no engine. The owner writes the row on every transition (failing: the
// failure; healed: the row removed; paused: who, why, and the failure it was paused on).
//
// A paused processor has a slot in the parked state with no engine: no ProcessEvent, no reduce
// of pushed events, no checkpoint, no revive. Its lease is held (and renewed) by the node that
// paused it or took it over, so verbs find it there. Appends to its stream land as ever; resume
// opens a fresh engine from the checkpoint, which catches up.

// Row states of driver.ProcessorStateRow.State.
const (
	rowFailing = foldtype.StateFailing
	rowPaused  = foldtype.StatePaused
)

// DefaultFailureMaxAttempts is FailurePolicy.MaxAttempts's default: after 10 failed attempts in a
// row (about 8.5 minutes of backoff from 1 s doubling) the processor is paused with its failure
// recorded, rather than retried for ever.
const DefaultFailureMaxAttempts = 10

// FailureAction is what a failure policy does once a processor failed MaxAttempts times in a row.
type FailureAction int

const (
	// PauseProcessor pauses the processor with its failure recorded (By "policy"); an operator
	// resumes it once the cause is fixed.
	PauseProcessor FailureAction = iota
	// KeepRetrying retries with backoff for ever (capped at FailRetryMax), as before policies.
	KeepRetrying
	// SkipEvent skips the event the processor fails on, as an operator's skip does
	// (docs/operations.md#skip): it is parked with its failure (By "policy") and the processor
	// goes on with the events behind it. For processors whose events are independent of each
	// other, where one poison event must not hold the rest.
	SkipEvent
)

// FailurePolicy says what the host does with a processor whose ProcessEvent keeps failing on one
// event (docs/operations.md#the-failure-policy). The zero value is the default: pause after
// DefaultFailureMaxAttempts attempts. Then: SkipEvent parks the event instead.
type FailurePolicy struct {
	// MaxAttempts is how many failed attempts in a row trigger Then. Defaults to
	// DefaultFailureMaxAttempts.
	MaxAttempts int
	// Then is what happens then. Defaults to PauseProcessor.
	Then FailureAction
}

// WithFailurePolicy sets the registration's failure policy (the default pauses the processor after
// DefaultFailureMaxAttempts failed attempts in a row).
func WithFailurePolicy(p FailurePolicy) RegisterOption {
	return func(o *registerOptions) { o.policy = p }
}

// actsAt returns the attempt count at which p acts (pauses or skips), or 0 when it never does.
func (p FailurePolicy) actsAt() int {
	if p.Then == KeepRetrying {
		return 0
	}
	if p.MaxAttempts <= 0 {
		return DefaultFailureMaxAttempts
	}
	return p.MaxAttempts
}

// pauseRecord is a paused slot's pause: the stored row.
type pauseRecord struct {
	row driver.ProcessorStateRow
}

func (p *pauseRecord) status() *foldtype.ProcessorPause {
	return &foldtype.ProcessorPause{Reason: p.row.Reason, By: p.row.By, Node: p.row.Node, Since: time.UnixMilli(p.row.SinceMs).UTC()}
}

// failureOfRow is the failure a row records, or nil.
func failureOfRow(r driver.ProcessorStateRow) *foldtype.ProcessorFailure {
	if r.Code == "" {
		return nil
	}
	f := &foldtype.ProcessorFailure{Code: foldtype.Code(r.Code), Message: r.Message, Offset: r.Offset,
		Attempts: r.Attempts, EventType: r.EventType, Node: r.Node}
	if r.State == rowFailing {
		f.Since = time.UnixMilli(r.SinceMs).UTC()
	}
	return f
}

// pausedError is the PROCESSOR_PAUSED error of a paused processor. Its Data holds "slug", "path",
// "reason", "by" and "since" (RFC 3339).
func pausedError(key procKey, r driver.ProcessorStateRow) *foldtype.Error {
	since := time.UnixMilli(r.SinceMs).UTC().Format(time.RFC3339Nano)
	return &foldtype.Error{
		Code: foldtype.CodeProcessorPaused,
		Message: fmt.Sprintf("host: processor %q on %q is paused since %s (%s); resume it to go on",
			key.slug, key.path, since, r.Reason),
		Data:      map[string]any{"slug": key.slug, "path": key.path, "reason": r.Reason, "by": r.By, "since": since},
		Retryable: true,
	}
}

// rowCache holds, on an exclusive database, every state row: this process is the only writer,
// so opening an engine asks memory, not the database. On a shared database it is unused.
type rowCache struct {
	mu     sync.Mutex
	loaded bool
	m      map[procKey]driver.ProcessorStateRow
}

// loadRows fills the row cache of an exclusive database (at New).
func (h *Host) loadRows(ctx context.Context) error {
	if !h.store.Driver().Exclusive() {
		return nil
	}
	rows, err := h.store.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{})
	if err != nil {
		return err
	}
	h.rows.mu.Lock()
	defer h.rows.mu.Unlock()
	h.rows.m = make(map[procKey]driver.ProcessorStateRow, len(rows))
	for _, r := range rows {
		h.rows.m[procKey{r.Path, r.Slug}] = r
	}
	h.rows.loaded = true
	return nil
}

// stateRow returns the stored state row of key, if any.
func (h *Host) stateRow(ctx context.Context, key procKey) (driver.ProcessorStateRow, bool, error) {
	if h.store.Driver().Exclusive() {
		h.rows.mu.Lock()
		defer h.rows.mu.Unlock()
		r, ok := h.rows.m[key]
		return r, ok, nil
	}
	rows, err := h.store.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{Path: key.path, Slug: key.slug})
	if err != nil || len(rows) == 0 {
		return driver.ProcessorStateRow{}, false, err
	}
	return rows[0], true, nil
}

// stateRowsOf returns the stored state rows of processor slug on paths, by path: in one read of
// the store however many paths there are (a bulk verb's page), or from the cache on an exclusive
// database.
func (h *Host) stateRowsOf(ctx context.Context, slug string, paths []string) (map[string]driver.ProcessorStateRow, error) {
	out := make(map[string]driver.ProcessorStateRow)
	if len(paths) == 0 {
		return out, nil
	}
	if h.store.Driver().Exclusive() {
		h.rows.mu.Lock()
		defer h.rows.mu.Unlock()
		for _, path := range paths {
			if r, ok := h.rows.m[procKey{path, slug}]; ok {
				out[path] = r
			}
		}
		return out, nil
	}
	rows, err := h.store.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{Paths: paths, Slug: slug})
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.Path] = r
	}
	return out, nil
}

// stateRowsOn returns the stored state rows of the processors on path, by slug.
func (h *Host) stateRowsOn(ctx context.Context, path string) (map[string]driver.ProcessorStateRow, error) {
	out := map[string]driver.ProcessorStateRow{}
	if h.store.Driver().Exclusive() {
		h.rows.mu.Lock()
		defer h.rows.mu.Unlock()
		for k, r := range h.rows.m {
			if k.path == path {
				out[k.slug] = r
			}
		}
		return out, nil
	}
	rows, err := h.store.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{Path: path})
	for _, r := range rows {
		out[r.Slug] = r
	}
	return out, err
}

// putRow stores r (and caches it on an exclusive database). With fence (the writing slot's
// lease, rowFence) the write is fenced as a checkpoint is: a node that froze past its lease
// writes nothing (LEASE_LOST) over the rows of the node that took the processor over.
func (h *Host) putRow(ctx context.Context, r driver.ProcessorStateRow, fence *driver.Fence) error {
	if err := h.store.Events().PutProcessorState(ctx, r, fence); err != nil {
		return err
	}
	if h.store.Driver().Exclusive() {
		h.rows.mu.Lock()
		if h.rows.m == nil {
			h.rows.m = map[procKey]driver.ProcessorStateRow{}
		}
		h.rows.m[procKey{r.Path, r.Slug}] = r
		h.rows.mu.Unlock()
	}
	return nil
}

// clearRow removes key's row: the processor runs. fence as putRow.
func (h *Host) clearRow(ctx context.Context, key procKey, fence *driver.Fence) error {
	if err := h.store.Events().ClearProcessorState(ctx, key.path, key.slug, fence); err != nil {
		return err
	}
	if h.store.Driver().Exclusive() {
		h.rows.mu.Lock()
		delete(h.rows.m, key)
		h.rows.mu.Unlock()
	}
	return nil
}

// rowFence is the fence of the rows sl's node writes: the lease sl was opened under.
func rowFence(sl *slot) *driver.Fence {
	return &driver.Fence{Key: leaseKey(sl.key), Generation: sl.lease.Generation}
}

// lostLeaseOf drops sl's lease and stops sl: a fenced write found that the lease moved on (this
// node froze past it). It returns the UNAVAILABLE a verb that met it answers: asked again, the
// verb goes to the node that holds the lease now.
func (h *Host) lostLeaseOf(sl *slot) error {
	h.leases.drop(sl.key, sl.lease.Generation)
	h.leaseLost(sl.key)
	return foldtype.NewError(foldtype.CodeUnavailable, map[string]any{"path": sl.key.path, "slug": sl.key.slug},
		"host: this node's lease of processor %q on %q ran out and another node holds it now; try again", sl.key.slug, sl.key.path)
}

// forgetRowsOf drops the cached rows of path (its stream was deleted, and its rows with it).
func (h *Host) forgetRowsOf(path string) {
	h.rows.mu.Lock()
	for k := range h.rows.m {
		if k.path == path {
			delete(h.rows.m, k)
		}
	}
	h.rows.mu.Unlock()
}

// syncFailureRow brings sl's stored row in line with its failing record, in the background and in
// order (one writer per slot; the last write is of the latest state): a failure is stored with
// its code, message, offset, event type and attempts; a healed processor's row is removed. A
// paused slot's row is the pause verb's, written before the engine stopped.
func (h *Host) syncFailureRow(sl *slot) {
	h.background(func() {
		sl.rowMu.Lock()
		defer sl.rowMu.Unlock()
		h.mu.Lock()
		var f *foldtype.ProcessorFailure
		if sl.failing != nil {
			cp := *sl.failing
			f = &cp
		}
		current := h.slots[sl.key] == sl && sl.state == slotOpen && sl.paused == nil
		h.mu.Unlock()
		if !current {
			return
		}
		ctx := h.ctx
		if f == nil {
			if sl.lastRow == nil {
				return
			}
			if err := h.clearRow(ctx, sl.key, rowFence(sl)); err != nil {
				if errors.Is(err, foldtype.ErrLeaseLost) {
					_ = h.lostLeaseOf(sl) // the row is the new owner's now
					return
				}
				h.log.Warn("host: clearing a processor's failure row failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
				return
			}
			sl.lastRow = nil
			return
		}
		r := driver.ProcessorStateRow{Path: sl.key.path, Slug: sl.key.slug, State: rowFailing, Code: string(f.Code),
			Message: f.Message, Offset: f.Offset, Attempts: f.Attempts, Node: h.leases.node, By: "host"}
		if last := sl.lastRow; last != nil && last.State == rowFailing && last.Offset == f.Offset {
			r.SinceMs, r.EventType = last.SinceMs, last.EventType
			if *last == r {
				return
			}
		} else {
			r.SinceMs = h.clock.Now().UnixMilli()
			r.EventType = h.eventType(ctx, sl.key.path, f.Offset)
		}
		if err := h.putRow(ctx, r, rowFence(sl)); err != nil {
			if errors.Is(err, foldtype.ErrLeaseLost) {
				_ = h.lostLeaseOf(sl) // the row is the new owner's now
				return
			}
			h.log.Warn("host: storing a processor's failure failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
			return
		}
		sl.lastRow = &r
	})
}

// background runs fn on a goroutine Shutdown waits for; once Shutdown began it runs nothing.
func (h *Host) background(fn func()) {
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// eventType returns the type of the event at offset on path ("" when it cannot be read).
func (h *Host) eventType(ctx context.Context, path string, offset int64) string {
	if offset <= 0 {
		return ""
	}
	page, err := h.store.Events().Stream(path).Read(ctx, offset-1, 1)
	if err != nil || len(page.Events) == 0 || page.Events[0].Offset != offset {
		return ""
	}
	return page.Events[0].Type
}

// openPausedLocked turns sl, being opened, into a paused slot without an engine: the row r says
// the processor is paused. h.mu held; the caller closes sl.ready.
func (h *Host) openPausedLocked(sl *slot, r driver.ProcessorStateRow) {
	sl.state = slotParked
	sl.paused = &pauseRecord{row: r}
	sl.parked = pausedError(sl.key, r)
	close(sl.closed) // no engine to wait for
	close(sl.caughtUp)
}

// Pause pauses processor slug on the stream at path (docs/operations.md#pause-and-resume): its
// row in the database says paused, with reason and the operator (foldtype.OperatorRequestOf(ctx)),
// and the node that runs it stops its engine: the event in progress finishes and is
// checkpointed, nothing more is processed, reduced or checkpointed. It stays paused across
// restarts, lease moves and node deaths until [Host.Resume]. A processor that is failing keeps
// its failure in the row. Pausing a paused processor does nothing.
//
// Any node takes the verb: one that does not run the processor asks the owner as RetryNow does;
// when no node runs it, the row is written here and the node that opens it next finds it paused.
// A parked processor, or a runner added with Add, fails with CONFLICT.
func (h *Host) Pause(ctx context.Context, path, slug, reason string) error {
	return h.pause(ctx, path, slug, reason, foldtype.OperatorRequestOf(ctx).Actor, nil)
}

// pause is Pause with who asked (by) and, for the failure policy, the failure it pauses on.
func (h *Host) pause(ctx context.Context, path, slug, reason, by string, onFailure *foldtype.ProcessorFailure) error {
	key := procKey{path, slug}
	for {
		h.mu.Lock()
		if h.shutdown {
			h.mu.Unlock()
			return ErrShutdown
		}
		reg := h.registrationFor(path, slug)
		sl := h.slots[key]
		if sl != nil && (sl.state == slotOpening || sl.state == slotClosing) {
			ch := sl.ready
			if sl.state == slotClosing {
				ch = sl.closed
			}
			h.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if sl != nil {
			if sl.paused != nil {
				h.mu.Unlock()
				return nil
			}
			if sl.state == slotParked || reg == nil || reg.added != nil {
				h.mu.Unlock()
				return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
					"host: processor %q on %q is parked or was added as a runner: it cannot be paused", slug, path)
			}
			f := onFailure
			if f == nil && sl.failing != nil {
				cp := *sl.failing
				f = &cp
			}
			h.mu.Unlock()
			r := h.pauseRow(key, reason, by, f)
			if f != nil && f.Offset > 0 {
				r.EventType = h.eventType(ctx, path, f.Offset)
			}
			// Durable first: a node that dies after this line leaves the processor paused. Under
			// the slot's row lock, so a failure row being written is not written over it.
			sl.rowMu.Lock()
			if err := h.putRow(ctx, r, rowFence(sl)); err != nil {
				sl.rowMu.Unlock()
				if errors.Is(err, foldtype.ErrLeaseLost) {
					// Nothing written. The failure policy's pause ends here: the node that took
					// the processor over runs its own policy.
					return h.lostLeaseOf(sl)
				}
				return err
			}
			paused := h.pauseSlot(sl, r)
			sl.rowMu.Unlock()
			if !paused {
				continue // the slot changed meanwhile: look again (the row stands)
			}
			return nil
		}
		h.mu.Unlock()
		if done, err := h.askOwner(ctx, key, url.Values{"op": {"pause"}}, nil); done || err != nil {
			return err
		}
		if reg == nil {
			return notRegistered(path, slug)
		}
		// No node runs it: the row is enough; whoever opens it next reads it after taking the
		// lease. One that took the lease before the row was written is asked now.
		if err := h.putRow(ctx, h.pauseRow(key, reason, by, onFailure), nil); err != nil {
			return err
		}
		h.mu.Lock()
		sl = h.slots[key]
		h.mu.Unlock()
		if sl != nil {
			continue
		}
		if _, err := h.askOwner(ctx, key, url.Values{"op": {"pause"}}, nil); err != nil {
			return err
		}
		return nil
	}
}

// pauseRow is the row of a pause of key now.
func (h *Host) pauseRow(key procKey, reason, by string, f *foldtype.ProcessorFailure) driver.ProcessorStateRow {
	r := driver.ProcessorStateRow{Path: key.path, Slug: key.slug, State: rowPaused, Reason: reason, Node: h.leases.node,
		By: by, SinceMs: h.clock.Now().UnixMilli()}
	if f != nil {
		r.Code, r.Message, r.Offset, r.Attempts, r.EventType = string(f.Code), f.Message, f.Offset, f.Attempts, f.EventType
	}
	return r
}

// pauseSlot stops the engine of the open slot sl and keeps the slot paused (r): it reports false
// when sl is not open any more. The engine stops taking work at once; the event in progress
// finishes and is checkpointed, its in-flight work settles, then it closes (in the background).
func (h *Host) pauseSlot(sl *slot, r driver.ProcessorStateRow) bool {
	h.mu.Lock()
	if sl.state != slotOpen || h.slots[sl.key] != sl {
		h.mu.Unlock()
		return false
	}
	sl.stopRetryLocked()
	sl.state = slotParked
	sl.paused = &pauseRecord{row: r}
	sl.parked = pausedError(sl.key, r)
	sl.failing, sl.failKey = nil, ""
	sl.isFailing.Store(false)
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	sub, runner := sl.sub, sl.runner
	sl.closed = make(chan struct{})
	done := sl.closed
	h.mu.Unlock()
	h.log.Info("host: processor paused", "path", sl.key.path, "slug", sl.key.slug, "reason", r.Reason, "by", r.By)
	go func() {
		defer close(done)
		if st, ok := runner.(workStopper); ok {
			st.StopTakingWork()
		}
		sub.Close()
		if _, err := settleAndClose(context.WithoutCancel(h.ctx), runner, h.cfg.LeaseTTL, false); err != nil && !errors.Is(err, foldtype.ErrClosed) {
			h.log.Warn("host: closing a paused processor's engine failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		}
	}()
	return true
}

// Resume resumes a paused processor (docs/operations.md#pause-and-resume): its row is removed and
// the node that holds it opens a fresh engine from its checkpoint, which catches up with what
// was appended meanwhile. A processor that is not paused fails with CONFLICT. Any node takes the
// verb, as Pause.
func (h *Host) Resume(ctx context.Context, path, slug string) error {
	key := procKey{path, slug}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return ErrShutdown
	}
	reg := h.registrationFor(path, slug)
	sl := h.slots[key]
	if sl != nil && sl.paused != nil {
		h.mu.Unlock()
		if err := h.clearRow(ctx, key, rowFence(sl)); err != nil {
			if errors.Is(err, foldtype.ErrLeaseLost) {
				return h.lostLeaseOf(sl)
			}
			return err
		}
		h.mu.Lock()
		if h.slots[key] == sl {
			delete(h.slots, key)
		}
		h.mu.Unlock()
		select {
		case <-sl.closed: // the paused engine is closed: the fresh one reads its checkpoint
		case <-ctx.Done():
			return ctx.Err()
		}
		h.log.Info("host: processor resumed", "path", path, "slug", slug)
		h.takeOver(key)
		return nil
	}
	h.mu.Unlock()
	if sl == nil {
		if done, err := h.askOwner(ctx, key, url.Values{"op": {"resume"}}, nil); done || err != nil {
			return err
		}
	}
	r, ok, err := h.stateRow(ctx, key)
	if err != nil {
		return err
	}
	if !ok || r.State != rowPaused {
		if reg == nil {
			return notRegistered(path, slug)
		}
		return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
			"host: processor %q on %q is not paused: there is nothing to resume", slug, path)
	}
	// Paused, and no node holds it: the row goes, and this node opens it to catch up.
	if err := h.clearRow(ctx, key, nil); err != nil {
		return err
	}
	if reg != nil {
		h.takeOver(key)
	}
	return nil
}

// applyPolicy pauses sl on its failure f, or skips the event it fails on, when its
// registration's failure policy says so after counted attempts in a row that failed for the
// processor's own reasons (in the background: failing runs inside a push).
func (h *Host) applyPolicy(sl *slot, f foldtype.ProcessorFailure, counted int) {
	at := sl.reg.policy.actsAt()
	if at == 0 || counted < at {
		return
	}
	if sl.reg.policy.Then == SkipEvent {
		h.background(func() { h.policySkip(sl, f) })
		return
	}
	h.background(func() {
		reason := fmt.Sprintf("failure policy: %d failed attempts in a row at offset %d (%s)", f.Attempts, f.Offset, f.Code)
		h.log.Warn("host: pausing a failing processor (its failure policy)", "path", sl.key.path, "slug", sl.key.slug,
			"attempts", f.Attempts, "offset", f.Offset, "code", f.Code)
		if err := h.pause(h.ctx, sl.key.path, sl.key.slug, reason, "policy", &f); err != nil && !errors.Is(err, ErrShutdown) {
			h.log.Warn("host: the failure policy's pause failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		}
	})
}

// openPaused ends the opening of sl as a paused slot: the lease is taken (a pause keeps its
// owner, so verbs find it) and no engine is built.
func (h *Host) openPaused(ctx context.Context, sl *slot, r driver.ProcessorStateRow, fail func(error), held *bool) {
	if !*held {
		l, err := h.leases.acquire(ctx, sl.key, sl.force)
		if err != nil {
			fail(err)
			return
		}
		sl.lease, *held = l, true
	}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		fail(ErrShutdown)
		return
	}
	if !h.leases.valid(sl.key, sl.lease.Generation) {
		h.mu.Unlock()
		*held = false
		fail(&elsewhereError{sl.lease})
		return
	}
	h.openPausedLocked(sl, r)
	close(sl.ready)
	h.mu.Unlock()
}

// refreshRowsOf reads again, on an exclusive database, the rows of path the cache holds: a stream
// created at path may follow one deleted with its rows (the store removes them with it).
func (h *Host) refreshRowsOf(path string) {
	if !h.store.Driver().Exclusive() {
		return
	}
	h.rows.mu.Lock()
	has := false
	for k := range h.rows.m {
		if k.path == path {
			has = true
			break
		}
	}
	h.rows.mu.Unlock()
	if !has {
		return
	}
	rows, err := h.store.Events().ProcessorStates(h.ctx, driver.ProcessorStateQuery{Path: path})
	if err != nil {
		return
	}
	h.forgetRowsOf(path)
	h.rows.mu.Lock()
	for _, r := range rows {
		h.rows.m[procKey{r.Path, r.Slug}] = r
	}
	h.rows.mu.Unlock()
}

// LastGoodState returns the last good state of processor slug on the stream at path: its
// checkpoint as stored, without waiting and without running anything (docs/operations.md#last-good-state).
// A failing or paused processor's reads answer it, marked, instead of only an error: the state
// every event before the one it fails on (or before the pause) made. A processor with no
// checkpoint yet answers its initial state at offset 0; one whose checkpoint is of another
// version of its contract fails with CATCHING_UP (its state is being rebuilt).
func (h *Host) LastGoodState(ctx context.Context, path, slug string) (foldtype.Snapshot[json.RawMessage], error) {
	h.mu.Lock()
	reg := h.registrationFor(path, slug)
	h.mu.Unlock()
	if reg == nil || reg.added != nil {
		return foldtype.Snapshot[json.RawMessage]{}, notRegistered(path, slug)
	}
	cps, err := h.store.Events().Checkpoints(ctx, path)
	if err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, err
	}
	cp, ok, err := cps.ReadCheckpoint(ctx, slug)
	if err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, err
	}
	if !ok {
		return foldtype.Snapshot[json.RawMessage]{State: reg.initial}, nil
	}
	if reg.atVersion(cp.ReducerVersion) == nil {
		return foldtype.Snapshot[json.RawMessage]{}, catchingUp(procKey{path, slug}, 0, nil)
	}
	if cp.State == nil {
		cp.State = reg.initial
	}
	return foldtype.Snapshot[json.RawMessage]{Offset: cp.ReducedThroughOffset, State: cp.State}, nil
}

// storedStateError is the PROCESSOR_PAUSED or PROCESSOR_FAILING error the stored row of key
// says, or nil: what a node that cannot ask the owner answers instead of waiting for a checkpoint
// that does not move.
func (h *Host) storedStateError(ctx context.Context, key procKey) error {
	r, ok, err := h.stateRow(ctx, key)
	if err != nil || !ok {
		return nil
	}
	if r.State == rowPaused {
		return pausedError(key, r)
	}
	if f := failureOfRow(r); f != nil {
		return failingError(key, f)
	}
	return nil
}

// RecordOp stores one operator's verb in the audit (docs/operations.md#audit), as taken on this
// node now.
func (h *Host) RecordOp(ctx context.Context, e foldtype.AuditEntry) error {
	return h.store.Events().AppendAudit(ctx, driver.AuditRecord{AtMs: h.clock.Now().UnixMilli(), Actor: e.Actor, Op: e.Op,
		Path: e.Path, Slug: e.Slug, Reason: e.Reason, Outcome: e.Outcome, Node: h.leases.node})
}

// Audit returns the stored operators' verbs on processor slug on path (every processor when both
// are empty; every processor on path when slug is), newest first, at most limit (0: 100).
func (h *Host) Audit(ctx context.Context, path, slug string, limit int) ([]foldtype.AuditEntry, error) {
	recs, err := h.store.Events().Audit(ctx, driver.AuditQuery{Path: path, Slug: slug, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]foldtype.AuditEntry, 0, len(recs))
	for _, r := range recs {
		out = append(out, foldtype.AuditEntry{ID: r.ID, At: time.UnixMilli(r.AtMs).UTC(), Actor: r.Actor, Op: r.Op, Path: r.Path,
			Slug: r.Slug, Reason: r.Reason, Outcome: r.Outcome, Node: r.Node})
	}
	return out, nil
}
