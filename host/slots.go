package host

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// A slot is one processor on one stream: the engine a registration runs there, while it is open.
// The rules of its life, kept in this file (docs/store.md#engines-of-a-pattern):
//
//   - One goroutine opens a slot: the one that created it in the slots map (a read, a revive, the
//     open queue's worker, or a registration). Others wait on ready.
//   - An open slot's engine gets every commit through its subscription, subscribed before its
//     catch-up, so nothing falls between the log and the pushes.
//   - A slot of a pattern registration is closed when it is idle for IdleTimeout or when the cap
//     needs room, never while refs > 0. Closing drains the subscription, then closes the engine,
//     then removes the slot: the next use opens a fresh engine from the checkpoint, which covers
//     every event the closed one processed, so no effect runs twice.
//   - A commit on a closing slot's stream marks it dirty; the closer queues it to open again.
//   - A slot of an exact registration is pinned: never closed while the host runs.
//   - A parked slot stays in the map with its error and no engine until the host stops.

type slotState int

const (
	slotOpening slotState = iota
	slotOpen
	slotClosing
	slotParked
)

type registration struct {
	pattern Pattern
	slug    string
	version string
	// initial is the contract's initial state as JSON (what a reset checkpoint holds).
	initial []byte
	// consumes are the contract's consumed event types (nil: all).
	consumes []string
	// project is the processor's live-state projection of a checkpoint state (JSON).
	project func(state json.RawMessage) (json.RawMessage, error)
	// build makes a fresh engine for a stream path under lease l with what the opening read already
	// (the zero preread: nothing); nil for a runner added with Add.
	build func(path string, pre preread, l driver.Lease) (foldtype.Runner, error)
	added foldtype.Runner
	// validate, set with RefuseInvalidEvents, checks an event's payload against the processor's
	// schema at append time.
	validate func(foldtype.Event) error
	// policy is the failure policy (WithFailurePolicy).
	policy FailurePolicy
	// next is the next version, once registered (RegisterNextVersion; host/rebuild.go).
	next atomic.Pointer[nextVersion]
}

func (r *registration) pinned() bool { return r.pattern.exact }

type slot struct {
	key procKey
	reg *registration

	state     slotState
	ready     chan struct{} // closed when opening ended (state is then open, parked, or the slot is gone)
	openErr   error         // why opening failed (the slot is gone)
	closed    chan struct{} // closed when a close finished
	caughtUp  chan struct{} // closed when the opening catch-up ended
	runner    foldtype.Runner
	sub       *stream.Subscription
	refs      int
	lastUsed  time.Time
	elem      *list.Element
	dirty     bool
	needWake  atomic.Bool // opened for a read: the first durable push wakes the stream
	openedFor openMode    // why the slot opened (h.mu)
	parked    error
	// failing is set while the engine's ProcessEvent keeps failing (host/failing.go); retryStop
	// cancels its armed retry, failKey names the failure last logged in full.
	failing   *foldtype.ProcessorFailure
	isFailing atomic.Bool // failing != nil, read without h.mu on every push
	// heldPushes counts the pushes not handed to the engine while it was failing (its retry
	// reads their events from the log).
	heldPushes atomic.Int64
	retryStop  func() bool
	failKey    string
	// policyFails counts the failed attempts in a row the failure policy counts: those that were
	// not the store out of reach (storeFailure), which say nothing of the processor (h.mu).
	policyFails int
	// behind is set when an engine verb failed for a reason other than a ProcessEvent: the engine
	// may be below the log, and catchUp retries its catch-up (host/catchupretry.go). Cleared
	// when a retry succeeds.
	behind   atomic.Bool
	catchUp  *catchUpRetry // h.mu
	streamID int64         // the stream's identity when the engine opened (StreamInfo.ID)
	stale    bool          // the stream was deleted and created again: the engine follows a dead stream
	lease    driver.Lease
	force    bool // take the lease even when another node is preferred (a read, a revive, a takeover)
	handoff  bool // closing to hand the lease to another node
	// head is the stream as a takeover's settle check read it, before the lease: the opening
	// takes it instead of reading the head again (nil: the opening reads it).
	head     *stream.StreamInfo
	settling bool // a takeover settling a caught-up processor idle (h.mu; host/settle.go)
	// paused is set on a paused slot (state parked, no engine; host/pause.go).
	paused *pauseRecord
	// rowMu orders the writes of the slot's state row; lastRow is the row last written or found
	// at opening (nil: none), under rowMu.
	rowMu   sync.Mutex
	lastRow *driver.ProcessorStateRow
	// parkMu orders the redrives and discards of the slot's parked events (host/parked.go).
	parkMu sync.Mutex
}

func newSlot(key procKey, reg *registration) *slot {
	return &slot{key: key, reg: reg, ready: make(chan struct{}), closed: make(chan struct{}), caughtUp: make(chan struct{})}
}

// registrationFor returns the registration that runs processor slug on path, or nil. h.mu held.
func (h *Host) registrationFor(path, slug string) *registration {
	if r := h.exact[procKey{path, slug}]; r != nil {
		return r
	}
	for _, r := range h.patterns {
		if r.slug == slug && r.pattern.Match(path) {
			return r
		}
	}
	return nil
}

// notRegistered builds the NOT_REGISTERED error for (path, slug).
func notRegistered(path, slug string) error {
	return foldtype.NewError(foldtype.CodeNotRegistered, map[string]any{"path": path, "slug": slug},
		"host: no processor %q runs on %q", slug, path)
}

// acquire returns the open slot of processor slug on path, opening it first when its registration
// is a pattern and the engine is closed; release it with h.release. A pattern slot opens only on an
// existing stream, so a read never creates a stream; mode says whether the opening is for a read
// (no wake record) or for work (a revive).
func (h *Host) acquire(ctx context.Context, path, slug string, mode openMode) (*slot, error) {
	h.mu.Lock()
	for {
		if h.shutdown {
			h.mu.Unlock()
			return nil, ErrShutdown
		}
		sl := h.slots[procKey{path, slug}]
		if sl == nil {
			reg := h.registrationFor(path, slug)
			if reg == nil || reg.added != nil {
				h.mu.Unlock()
				return nil, notRegistered(path, slug)
			}
			if l, ok := h.leases.owner(procKey{path, slug}); ok && l.Live && l.Holder != h.leases.node && time.Now().Before(l.Expires) {
				h.mu.Unlock()
				return nil, &elsewhereError{l}
			}
			// An exact registration has no slot while another node runs it: it opens here
			// once this node takes the lease.
			sl = newSlot(procKey{path, slug}, reg)
			sl.force = true
			h.slots[sl.key] = sl
			h.wg.Add(1)
			h.mu.Unlock()
			go func() {
				defer h.wg.Done()
				m := mode
				if reg.pinned() {
					m = openForRegister
				}
				h.open(sl, m, false)
			}()
			h.mu.Lock()
			continue
		}
		switch sl.state {
		case slotOpen:
			sl.refs++
			h.touchLocked(sl)
			h.mu.Unlock()
			return sl, nil
		case slotParked:
			err := sl.parked
			h.mu.Unlock()
			return nil, err
		}
		ch := sl.ready
		if sl.state == slotClosing {
			ch = sl.closed
		}
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		h.mu.Lock()
		if err := sl.openErr; err != nil {
			if errors.Is(err, errSettledIdle) && h.slots[sl.key] != sl {
				continue // a takeover found nothing to do and opened nothing: open it for this caller
			}
			if errors.Is(err, errNotPreferred) && h.slots[sl.key] != sl {
				// A commit's opening that left the lease to the node preferred for it: this
				// caller needs an answer now, so it opens (or asks the owner) itself.
				continue
			}
			if sl.openedFor != openForRead && mode == openForRead && h.slots[sl.key] != sl &&
				(errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone)) {
				// An opening for an earlier stream at the path, deleted meanwhile: the read
				// opens its own engine on the stream there now (or learns there is none).
				continue
			}
			h.mu.Unlock()
			return nil, err
		}
	}
}

// release ends a use of sl that acquire began. An engine that becomes idle while more are open
// than MaxOpenEngines allows (several opened at once, each finding room) lets the excess close.
func (h *Host) release(sl *slot) {
	h.mu.Lock()
	sl.refs--
	h.touchLocked(sl)
	h.trimLocked()
	h.mu.Unlock()
}

// trimLocked closes, in the background, the least recently used idle engines beyond
// MaxOpenEngines. h.mu held.
func (h *Host) trimLocked() {
	if h.lru.Len() <= h.cfg.MaxOpenEngines || h.shutdown {
		return
	}
	var excess []*slot
	for e := h.lru.Back(); e != nil && h.lru.Len() > h.cfg.MaxOpenEngines; {
		sl := e.Value.(*slot)
		e = e.Prev()
		if sl.refs == 0 {
			h.beginCloseLocked(sl)
			excess = append(excess, sl)
		}
	}
	if len(excess) == 0 {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for _, sl := range excess {
			h.finishClose(h.ctx, sl)
		}
	}()
}

// touchLocked marks sl used now. h.mu held.
func (h *Host) touchLocked(sl *slot) {
	if sl.elem == nil {
		return
	}
	sl.lastUsed = h.clock.Now()
	h.lru.MoveToFront(sl.elem)
}

// openMode says why a slot opens, which decides whether the stream gets its wake record
// (docs/store.md#wake-records).
type openMode int

const (
	// openForRead opens an existing stream's engine to serve a read: no wake record now; the
	// first durable push the engine gets appends it (the processor starts work then).
	openForRead openMode = iota
	// openForWork opens an existing stream's engine to process (a commit, a revive, a registration
	// scan, a re-created stream): the stream is woken once per host start unless closed.
	openForWork
	// openForRegister opens an exact-path registration's engine, creating the stream (woken) when
	// it does not exist.
	openForRegister
)

// open opens sl, whose creator the caller is: it builds the engine, makes room under the cap,
// wakes the stream as mode says, subscribes the engine and catches it up. Only openForRegister
// creates a missing stream; the others fail with the stream's STREAM_NOT_FOUND or STREAM_GONE. With
// waitCatchUp the catch-up runs before open returns (the open queue's workers, so their opens do
// not outrun the cap); otherwise in the background. The slot holds a reference while it catches
// up, so the cap never closes it mid-way.
func (h *Host) open(sl *slot, mode openMode, waitCatchUp bool) {
	h.mu.Lock()
	sl.openedFor = mode
	h.mu.Unlock()
	ctx := h.ctx
	reg := sl.reg
	ph := openPhases{start: time.Now()}
	var held bool // the lease is this open's: released when it fails
	fail := func(err error) {
		if held {
			h.leases.release(sl.key, sl.lease.Generation, errors.Is(err, foldtype.ErrNotRegistered) ||
				errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone))
		}
		h.mu.Lock()
		sl.openErr = err
		if h.slots[sl.key] == sl {
			delete(h.slots, sl.key)
		}
		close(sl.ready)
		h.mu.Unlock()
	}
	var info stream.StreamInfo
	var pre preread
	var runner foldtype.Runner
	var sub *stream.Subscription
	var gate chan struct{} // pushes wait until the slot is published
	hadRow := false        // a state row was found: the first sync after the catch-up clears or keeps it
	if mode != openForRegister && reg.added == nil && h.store.Driver().Exclusive() {
		// The state row comes from memory here (host/pause.go): a paused processor takes its
		// lease and opens no engine.
		if r, ok, _ := h.stateRow(ctx, sl.key); ok {
			if r.State == rowPaused {
				h.openPaused(ctx, sl, r, fail, &held)
				return
			}
			sl.lastRow, hadRow = &r, true
		}
		var ok bool
		if info, pre, runner, sub, gate, ok = h.openExclusive(ctx, sl, mode, fail, &held); !ok {
			return
		}
	} else {
		if mode != openForRegister {
			var err error
			if sl.head != nil {
				info, sl.head = *sl.head, nil
			} else {
				info, err = h.store.Events().HeadStream(ctx, sl.key.path)
			}
			ph.mark("head")
			if err != nil {
				if sl.force && (errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone)) {
					// A lease left by an engine of a stream deleted since: settle it as idle.
					if l, lerr := h.leases.acquire(ctx, sl.key, true); lerr == nil {
						sl.lease, held = l, true
					}
				}
				fail(err)
				return
			}
		}
		l, err := h.leases.acquire(ctx, sl.key, sl.force)
		ph.mark("lease")
		if err != nil {
			fail(err)
			return
		}
		sl.lease, held = l, true
		if reg.added == nil {
			// Read after the lease is taken: a pause written before is seen here, and one
			// written after finds this node's lease and asks it (host/pause.go).
			r, ok, err := h.stateRow(ctx, sl.key)
			if err != nil {
				fail(err)
				return
			}
			if ok && r.State == rowPaused {
				h.openPaused(ctx, sl, r, fail, &held)
				return
			}
			if ok {
				sl.lastRow, hadRow = &r, true
			}
		}
		runner = reg.added
		if runner == nil {
			var err error
			if runner, err = reg.build(sl.key.path, preread{info: info}, l); err != nil {
				fail(err)
				return
			}
		}
		ph.mark("build")
		if !reg.pinned() {
			h.makeRoom(ctx)
		}
		switch mode {
		case openForRegister:
			if _, err := h.store.Events().Wake(ctx, sl.key.path, stream.WakeRequest); err != nil {
				fail(err)
				return
			}
			var err error
			if info, err = h.store.Events().HeadStream(ctx, sl.key.path); err != nil {
				fail(err)
				return
			}
			h.markWoken(sl.key.path, info.ID())
		case openForWork:
			if err := h.wakeOnce(ctx, sl.key.path, info, stream.WakeRequest); err != nil {
				fail(err)
				return
			}
		default:
			sl.needWake.Store(!info.Closed)
		}
		ph.mark("wake")
		sl.streamID = info.ID()
		gate = make(chan struct{})
		if sub, err = h.store.Events().Subscribe(sl.key.path, gated(gate, h.deliverTo(sl, runner)), stream.SubscribeOptions{
			Consumes:         runner.Consumes(),
			MaxPendingEvents: h.cfg.MaxPendingEvents,
			Name:             runner.Slug(),
			Logger:           h.log,
		}); err != nil {
			fail(err)
			return
		}
	}
	l := sl.lease
	// Published under the lock, and only while the host runs: Shutdown closes exactly the slots it
	// finds open, so one opened after it would stay subscribed until the store closes.
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		sub.Close()
		if reg.added == nil {
			_ = closeRunner(context.Background(), runner)
		}
		fail(ErrShutdown)
		return
	}
	if !h.leases.valid(sl.key, l.Generation) {
		// The lease was lost while the engine was being built.
		h.mu.Unlock()
		sub.Close()
		if reg.added == nil {
			_ = closeRunner(context.Background(), runner)
		}
		held = false
		fail(&elsewhereError{l})
		return
	}
	sl.runner, sl.sub, sl.state = runner, sub, slotOpen
	sl.refs++ // the opening catch-up's
	if !reg.pinned() {
		sl.lastUsed = h.clock.Now()
		sl.elem = h.lru.PushFront(sl)
		h.armSweeperLocked()
	}
	close(sl.ready)
	if gate != nil {
		close(gate)
	}
	h.wg.Add(1)
	h.mu.Unlock()
	ph.mark("subscribe")
	catchUp := func() {
		defer h.wg.Done()
		err := runner.CatchUpFromLog(ctx)
		ph.mark("catchUp")
		ph.log(h, sl)
		pre.first.drop() // read by now, or stale: later reads go to the store
		h.failed(sl, "catch-up", err)
		if reg.next.Load() != nil {
			h.resumeRebuild(sl) // a rebuild an earlier owner left goes on here (host/rebuild.go)
		}
		if hadRow {
			h.syncFailureRow(sl) // a failure row left by an earlier owner: kept or cleared
		}
		// Released before the readers waiting for the catch-up go on, so an engine they are done
		// with is idle (and may make room under the cap) as soon as they are.
		h.release(sl)
		close(sl.caughtUp)
	}
	if waitCatchUp {
		catchUp()
	} else {
		go catchUp()
	}
}

// deliverTo is the subscription's push into the slot's engine. A failed push is reported through
// the host's folded logger (the engine heals it on the next push or read), and a conflict on the
// processor's own emitted event parks it.
func (h *Host) deliverTo(sl *slot, r foldtype.Runner) stream.DeliverFunc {
	return func(ctx context.Context, events []foldtype.Event, rg foldtype.ScannedRange) error {
		if !sl.reg.pinned() {
			h.mu.Lock()
			h.touchLocked(sl)
			h.mu.Unlock()
		}
		if rg.Through < rg.After || slices.ContainsFunc(events, func(ev foldtype.Event) bool { return ev.Offset <= rg.After }) {
			// A range that runs backwards: the stream was deleted and created again, and this
			// push is the new stream's. It is not the old engine's to process.
			h.recreated(sl)
			return nil
		}
		if sl.needWake.Load() && slices.ContainsFunc(events, func(ev foldtype.Event) bool { return !ev.Ephemeral }) &&
			sl.needWake.CompareAndSwap(true, false) {
			// The engine opened for a read starts work: the stream gets its wake record now.
			if err := h.wakeOnce(ctx, sl.key.path, stream.StreamInfo{}, stream.WakeRequest); err != nil && ctx.Err() == nil &&
				!errors.Is(err, foldtype.ErrStreamNotFound) && !errors.Is(err, foldtype.ErrStreamGone) {
				h.log.Warn("host: waking a stream failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
			}
		}
		if h.followEngine(sl) {
			// Its retry reads these events from the log; pushing them now would only run the
			// failing event again, outside the backoff.
			sl.heldPushes.Add(1)
			return nil
		}
		err := r.ProcessEventBatch(ctx, events, rg)
		if ctx.Err() == nil {
			h.failed(sl, "push", err)
		}
		return nil
	}
}

// failed looks at an error one of sl's engine verbs returned: a failure no retry gets past parks
// the slot (see parks); a ProcessEvent failure marks it failing (host/failing.go); anything else
// is logged (folded), marks the engine behind and arms a retry of its catch-up
// (host/catchupretry.go), so it heals without waiting for a push, read or revive.
func (h *Host) failed(sl *slot, what string, err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, foldtype.ErrClosed) {
		return
	}
	if parks(err) {
		h.park(sl, err)
		return
	}
	if pf, ok := sl.runner.(processFailer); ok {
		if f := pf.ProcessFailure(); f != nil {
			h.failing(sl, f)
			return
		}
	}
	if !h.catchUpLater(sl, what, err) {
		h.log.Warn("host: processor "+what+" failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
	}
}

// parks reports whether err is a failure no retry of this engine gets past, which parks the
// processor (docs/store.md#parked-processors): a conflict on one of its own emitted events (every
// retry would emit it again), or a reduced state too large to checkpoint (the engine latched the
// refusal, docs/engine.md#the-latch).
func parks(err error) bool {
	return errors.Is(err, foldtype.ErrIdempotencyConflict) || errors.Is(err, foldtype.ErrReduceCheckpointTooLarge)
}

// parkRemedy says what an operator does about a parked processor's cause.
func parkRemedy(cause error) string {
	if errors.Is(cause, foldtype.ErrReduceCheckpointTooLarge) {
		return "its reduced state is too large to checkpoint: keep less in it (a new version of the processor), then restart the host"
	}
	return "fix the conflicting event, then restart the host"
}

// parkedError is the PROCESSOR_PARKED error of sl with its cause.
func parkedError(key procKey, cause error) *foldtype.Error {
	return &foldtype.Error{
		Code: foldtype.CodeProcessorParked,
		Message: fmt.Sprintf("host: processor %q on %q is parked: %v (%s)",
			key.slug, key.path, cause, parkRemedy(cause)),
		Data: map[string]any{"slug": key.slug, "path": key.path, "cause": cause.Error()},
		Err:  cause,
	}
}

// park stops sl's engine for good (until the host restarts) and keeps its error for reads and
// status. It never blocks: the engine is closed in the background (park may run inside a push).
func (h *Host) park(sl *slot, cause error) {
	h.mu.Lock()
	if sl.state != slotOpen || h.slots[sl.key] != sl {
		h.mu.Unlock()
		return
	}
	sl.stopRetryLocked()
	sl.state = slotParked
	sl.parked = parkedError(sl.key, cause)
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	sub, runner := sl.sub, sl.runner
	sl.closed = make(chan struct{}) // closed once the engine is closed; Shutdown waits for it
	done := sl.closed
	h.mu.Unlock()
	h.log.Error("host: processor parked: "+parkRemedy(cause), "path", sl.key.path,
		"slug", sl.key.slug, "code", foldtype.CodeProcessorParked, "cause", foldtype.CodeOf(cause), "err", cause)
	go func() {
		defer close(done)
		sub.Close()
		_ = closeRunner(context.Background(), runner)
	}()
}

// makeRoom closes least recently used idle slots of pattern registrations until one more fits
// under MaxOpenEngines (or none is idle).
func (h *Host) makeRoom(ctx context.Context) {
	for {
		h.mu.Lock()
		if h.lru.Len() < h.cfg.MaxOpenEngines {
			h.mu.Unlock()
			return
		}
		var victim *slot
		for e := h.lru.Back(); e != nil; e = e.Prev() {
			if sl := e.Value.(*slot); sl.refs == 0 {
				victim = sl
				break
			}
		}
		if victim == nil {
			h.mu.Unlock()
			return
		}
		h.beginCloseLocked(victim)
		h.mu.Unlock()
		h.finishClose(ctx, victim)
	}
}

// beginCloseLocked takes an idle open slot out of service. h.mu held.
func (h *Host) beginCloseLocked(sl *slot) {
	sl.stopRetryLocked()
	sl.state = slotClosing
	h.lru.Remove(sl.elem)
	sl.elem = nil
}

// finishClose drains the slot's pushes, closes its engine and forgets the slot; a commit that
// arrived meanwhile queues it to open again.
func (h *Host) finishClose(ctx context.Context, sl *slot) {
	ctx = context.WithoutCancel(ctx)
	seen := sl.sub.SeenDurableThrough()
	err := sl.sub.Drain(ctx)
	// The closing catch-up reads the log only when the engine may be behind it. On an exclusive
	// database every commit reaches the subscription before the commit watch, so a commit the
	// subscription had not seen when the slot began closing marks it dirty (it opens again);
	// an engine whose cursor reached what the subscription saw, with every push delivered and none
	// failing, is at the head and would read nothing.
	// An engine marked behind (its catch-up failed) may be below events committed before its
	// subscription began, which the subscription never saw.
	atHead := err == nil && h.store.Driver().Exclusive() && !h.isFailing(sl) && !sl.behind.Load() &&
		sl.runner.ReducedThroughOffset() >= seen
	if !atHead {
		// The closing catch-up (settleAndClose's, run here to see its error): it queues behind
		// the units on the engine's chain.
		if cuerr := sl.runner.CatchUpFromLog(ctx); cuerr != nil && !errors.Is(cuerr, foldtype.ErrClosed) {
			h.log.Warn("host: a closing engine could not read the log; events behind its checkpoint wait for the stream's next event",
				"path", sl.key.path, "slug", sl.key.slug, "code", foldtype.CodeOf(cuerr), "err", cuerr)
		}
	}
	settled, cerr := settleAndClose(ctx, sl.runner, h.cfg.LeaseTTL, false)
	if err == nil {
		err = cerr
	}
	if err != nil {
		h.log.Warn("host: closing an idle engine failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
	}
	// Idle: nothing left to do, so no node needs to take it until the stream changes; a handoff
	// is taken over by the preferred node at once, and so is an engine a shutdown stopped from
	// taking work (its catch-up may have left events behind the checkpoint).
	h.mu.Lock()
	stopped := h.shutdown
	h.mu.Unlock()
	h.releaseAfterClose(sl, settled, !sl.handoff && !stopped && err == nil)
	h.forgetClosed(sl)
}

// forgetClosed forgets a slot whose engine closed and whose lease was settled; a commit that
// arrived meanwhile queues it to open again.
func (h *Host) forgetClosed(sl *slot) {
	h.mu.Lock()
	if h.slots[sl.key] == sl {
		delete(h.slots, sl.key)
	}
	close(sl.closed)
	if sl.dirty && !h.shutdown {
		h.queueOpenLocked(sl.key)
	}
	h.mu.Unlock()
}

// armSweeperLocked starts the idle sweep when it is not running. h.mu held.
func (h *Host) armSweeperLocked() {
	if h.sweeper != nil || h.cfg.IdleTimeout < 0 || h.shutdown {
		return
	}
	h.sweeper = h.clock.AfterFunc(h.cfg.IdleTimeout/2, h.sweep)
}

// sweep closes the slots idle for IdleTimeout — not failing, nor behind the log with a catch-up
// to retry — and, once they are closed, arms the next sweep while pattern engines are open (or it
// closed some).
func (h *Host) sweep() {
	h.mu.Lock()
	h.sweeper = nil
	if h.shutdown {
		h.mu.Unlock()
		return
	}
	now := h.clock.Now()
	var idle []*slot
	for e := h.lru.Back(); e != nil; {
		sl := e.Value.(*slot)
		e = e.Prev()
		// A failing engine, or one behind the log, is not idle: it has work, and closing it
		// would cancel the retry that does it, leaving the work until the stream's next event.
		if sl.refs == 0 && now.Sub(sl.lastUsed) >= h.cfg.IdleTimeout && sl.failing == nil && sl.catchUp == nil {
			h.beginCloseLocked(sl)
			idle = append(idle, sl)
		}
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	for _, sl := range idle {
		h.finishClose(h.ctx, sl)
	}
	h.mu.Lock()
	if h.lru.Len() > 0 || len(idle) > 0 {
		h.armSweeperLocked()
	}
	h.mu.Unlock()
}

// stopRetryLocked cancels sl's armed retries (of a failing event, of a catch-up), if any. h.mu held.
func (sl *slot) stopRetryLocked() {
	if sl.retryStop != nil {
		sl.retryStop()
		sl.retryStop = nil
	}
	sl.stopCatchUpLocked()
}

// openPhases times the steps of an engine's opening on a shared database, logged at debug level
// for a takeover (docs/postgres.md#graceful-hand-over breaks a hand-over down by them).
type openPhases struct {
	start, last time.Time
	steps       []any
}

// mark ends the step named what.
func (p *openPhases) mark(what string) {
	now := time.Now()
	if p.last.IsZero() {
		p.last = p.start
	}
	p.steps = append(p.steps, what, now.Sub(p.last))
	p.last = now
}

// log logs the steps of a takeover's opening.
func (p *openPhases) log(h *Host, sl *slot) {
	if !sl.force || !h.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	h.log.Debug("host: opened a processor taken over", append([]any{"path", sl.key.path, "slug", sl.key.slug,
		"total", time.Since(p.start)}, p.steps...)...)
}
