package host

import (
	"context"
	"errors"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Engines that change hands or streams: a lease taken over from another node or handed to one,
// a lease lost, and a stream deleted and created again under a running engine.

// created is the store's notice of a stream created at path: if an engine follows an earlier
// stream at that path (deleted since), it is reset. Runs on the notice's own goroutine.
func (h *Host) created(path string) {
	h.mu.Lock()
	var follow []*slot
	for key, sl := range h.slots {
		if key.path == path && (sl.state == slotOpen || sl.state == slotParked) {
			follow = append(follow, sl)
		}
	}
	h.mu.Unlock()
	h.refreshRowsOf(path)
	if len(follow) == 0 {
		return
	}
	info, err := h.store.Events().HeadStream(h.ctx, path)
	if err != nil {
		return // gone again: the next creation's notice resets it
	}
	for _, sl := range follow {
		if sl.streamID != info.ID() {
			h.recreated(sl)
		}
	}
}

// recreated resets the engine of sl, whose stream was deleted and created again
// (docs/store.md#deleted-streams): the old engine is closed without settling (its stream is gone),
// the checkpoint and claim it may have written since the delete are removed, and the registration
// stays: an exact path's processor opens afresh — the contract's initial state at offset 0 — on
// the new stream and runs its effects for the new events; a pattern's opens again on the next
// commit; a runner added with Add is removed (the host cannot rebuild it).
func (h *Host) recreated(sl *slot) {
	h.mu.Lock()
	if h.slots[sl.key] != sl || (sl.state != slotOpen && sl.state != slotParked) || h.shutdown {
		h.mu.Unlock()
		return
	}
	wasParked := sl.state == slotParked
	sl.stopRetryLocked()
	sl.stale, sl.state = true, slotClosing
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	// The slot stays in the map (closing) until its checkpoint is gone, so no new engine on the
	// path reads it; an exact path's fresh slot takes its place at once (opening), so reads wait
	// for it rather than answer NOT_REGISTERED.
	var fresh *slot
	switch {
	case sl.reg.added != nil:
		delete(h.exact, sl.key)
		h.log.Warn("host: the stream of an added runner was deleted and created again; the runner is removed",
			"path", sl.key.path, "slug", sl.key.slug)
	case sl.reg.pinned():
		fresh = newSlot(sl.key, sl.reg)
		fresh.force = true
		h.slots[sl.key] = fresh
	}
	h.wg.Add(1)
	closed := sl.closed
	if wasParked {
		closed = make(chan struct{}) // the parked slot's channel is its park goroutine's
	}
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		ctx := context.WithoutCancel(h.ctx)
		if sl.sub != nil { // a paused slot has no engine
			sl.sub.Close()
		}
		if sl.runner != nil {
			_ = closeRunner(ctx, sl.runner)
		}
		if sl.reg.added == nil && sl.reg.initial != nil {
			// The contract's initial state at offset 0: what a missing row gives, over a row the
			// old stream left (or the old engine wrote after the delete).
			reset := foldtype.Checkpoint{ReducerVersion: sl.reg.version, State: sl.reg.initial}
			cps, err := h.checkpoints(sl.key.path)
			if err == nil {
				// Fenced: a node that lost the processor meanwhile resets nothing.
				err = cps.Fenced(leaseKey(sl.key), sl.lease.Generation).WriteCheckpoint(ctx, sl.key.slug, reset, true)
			}
			if err != nil {
				h.log.Warn("host: resetting the checkpoint of a deleted stream failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
			}
		}
		if err := h.store.Events().Claim(ctx, sl.key.path, sl.key.slug, time.Time{}); err != nil {
			h.log.Warn("host: releasing the claim of a deleted stream failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		}
		h.leases.release(sl.key, sl.lease.Generation, false)
		h.mu.Lock()
		if h.slots[sl.key] == sl {
			delete(h.slots, sl.key)
			if !sl.reg.pinned() && !h.shutdown {
				h.queueOpenLocked(sl.key)
			}
		}
		if !wasParked {
			close(closed)
		}
		h.mu.Unlock()
		if fresh != nil {
			h.open(fresh, openForWork, false)
			if err := fresh.openErr; err != nil && !errors.Is(err, ErrShutdown) {
				h.log.Warn("host: reopening a processor on a re-created stream failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
			}
		}
	}()
}

// isElsewhere reports an open that did not happen because another node runs the processor or
// is preferred for it.
func isElsewhere(err error) bool {
	var ee *elsewhereError
	return errors.As(err, &ee) || errors.Is(err, errNotPreferred)
}

// takeOver opens the engine of key on this node: its lease is free and this node is to run it.
func (h *Host) takeOver(key procKey) {
	h.mu.Lock()
	reg := h.registrationFor(key.path, key.slug)
	if h.shutdown || reg == nil || reg.added != nil || h.slots[key] != nil {
		h.mu.Unlock()
		return
	}
	sl := newSlot(key, reg)
	sl.force = true
	h.slots[key] = sl
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		start := time.Now()
		mode := openForWork
		if reg.pinned() {
			mode = openForRegister
		} else if h.settleCaughtUp(sl) {
			h.log.Debug("host: took a processor over and settled it idle", "path", key.path, "slug", key.slug,
				"after", time.Since(start))
			return // nothing to do: settled idle, no engine, nothing written
		}
		settled := time.Since(start)
		h.open(sl, mode, false)
		h.log.Debug("host: took a processor over", "path", key.path, "slug", key.slug, "settleCheck", settled,
			"open", time.Since(start)-settled, "err", sl.openErr)
		if err := sl.openErr; err != nil && !errors.Is(err, ErrShutdown) && !isElsewhere(err) && !errors.Is(err, foldtype.ErrNotRegistered) &&
			!errors.Is(err, foldtype.ErrStreamNotFound) && !errors.Is(err, foldtype.ErrStreamGone) {
			h.log.Warn("host: taking a processor over failed", "path", key.path, "slug", key.slug, "err", err)
		}
	}()
}

// handOff closes the idle engine of key and hands its lease to the node preferred for it.
func (h *Host) handOff(key procKey) {
	h.mu.Lock()
	sl := h.slots[key]
	if h.shutdown || sl == nil || sl.state != slotOpen || sl.refs > 0 {
		h.mu.Unlock()
		return
	}
	h.beginHandOffLocked(sl)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		h.finishClose(h.ctx, sl)
	}()
}

// beginHandOffLocked takes an open slot out of service to close it and hand its lease on, in a
// goroutine the caller starts (counted in h.wg). h.mu held.
func (h *Host) beginHandOffLocked(sl *slot) {
	sl.stopRetryLocked()
	sl.handoff = true
	sl.state = slotClosing
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	h.wg.Add(1)
}

// leaseUnconfirmed winds down the engine of key, whose lease renewals could not confirm before
// its local deadline (a loaded machine, a slow or unreachable database): it takes no new work,
// the unit in progress finishes — what it emits and its checkpoint commit through the database's
// fence unless another node took the lease over (docs/reliability.md#a-node-that-freezes) —
// and the engine closes; the lease is then released for a takeover, or left to run out when the
// work did not settle in a lease time. Cancelling that unit instead could cut it after its
// effects ran and before its checkpoint, and the next holder would run them again. false: no
// engine is open under the lease (a closing one's close settles the lease itself: true).
func (h *Host) leaseUnconfirmed(key procKey) bool {
	h.mu.Lock()
	sl := h.slots[key]
	if sl == nil || (sl.state != slotOpen && sl.state != slotClosing) {
		h.mu.Unlock()
		return false
	}
	if sl.state == slotClosing {
		h.mu.Unlock()
		return true
	}
	h.beginHandOffLocked(sl)
	generation := sl.lease.Generation
	h.mu.Unlock()
	h.log.Warn("host: processor lease not confirmed; its engine winds down: no new work, the work in progress finishes under the database's fence",
		"path", key.path, "slug", key.slug, "generation", generation)
	if st, ok := sl.runner.(workStopper); ok {
		st.StopTakingWork()
	}
	go func() {
		defer h.wg.Done()
		ctx := context.WithoutCancel(h.ctx)
		sl.sub.Close()
		// Two lease times: a unit slowed as much as the renewals were still settles; past that
		// the database is likely out of reach, and nothing the unit writes could commit.
		settled, err := settleAndClose(ctx, sl.runner, 2*h.cfg.LeaseTTL, false)
		if err != nil && !errors.Is(err, foldtype.ErrClosed) {
			h.log.Warn("host: closing an engine whose lease was not confirmed failed", "path", key.path, "slug", key.slug, "err", err)
		}
		h.releaseAfterClose(sl, settled, false)
		h.forgetClosed(sl)
	}()
	return true
}

// leaseLost stops the engine of key at once: its lease changed hands or ran out. Nothing is
// settled (its writes are fenced anyway); the node that holds the lease now runs the processor.
// An engine already closing (winding down under a lease renewals could not confirm) has its
// unit in progress cancelled: another node runs the processor now.
func (h *Host) leaseLost(key procKey) {
	h.mu.Lock()
	sl := h.slots[key]
	if sl != nil && sl.state == slotClosing && sl.handoff {
		h.wg.Add(1)
		h.mu.Unlock()
		go func() {
			defer h.wg.Done()
			_ = closeRunner(context.WithoutCancel(h.ctx), sl.runner)
		}()
		return
	}
	if sl == nil || (sl.state != slotOpen && sl.state != slotParked) {
		h.mu.Unlock()
		return
	}
	wasParked := sl.state == slotParked
	sl.state = slotClosing
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	delete(h.slots, key)
	closed := sl.closed
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		if wasParked {
			return
		}
		sl.sub.Close()
		_ = closeRunner(context.WithoutCancel(h.ctx), sl.runner)
		close(closed)
	}()
}
