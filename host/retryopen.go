package host

import (
	"context"
	"errors"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Work owed after the database was out of reach (docs/reliability.md#the-mixed-nemesis-soak): an
// opening queued by a commit, or an engine's catch-up, that failed because the database could not
// be reached is not dropped — the commit that asked for it may be the stream's last, and no later
// push would bring the engine there. It is retried with backoff on the store's clock,
// OpenRetryBase doubling up to OpenRetryMax, until it succeeds, another node holds the lease (the
// opening answers that it runs elsewhere; a catch-up's engine loses its lease and stops), the
// registration or the stream is gone, or the host shuts down.

// Retry backoff of a failed opening or catch-up.
const (
	// OpenRetryBase is the delay before the first retry of an opening or catch-up that failed.
	OpenRetryBase = 250 * time.Millisecond
	// OpenRetryMax caps the delay between retries.
	OpenRetryMax = 5 * time.Second
)

// openRetryDelay is the delay after the attempts-th failure in a row.
func openRetryDelay(attempts int) time.Duration {
	d := OpenRetryBase
	for i := 1; i < attempts && d < OpenRetryMax; i++ {
		d *= 2
	}
	return min(d, OpenRetryMax)
}

// openRetry is the armed retry of one queued opening.
type openRetry struct {
	attempts int
	stop     func() bool
}

// owedAgain reports whether work that failed with err is owed again later: not when it succeeded,
// the host is stopping, another node runs the processor (or is preferred for it and was told), the
// processor settled idle, its registration or stream is gone, or no retry can get past err.
func owedAgain(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrShutdown), isElsewhere(err), errors.Is(err, errNotPreferred),
		errors.Is(err, errSettledIdle), errors.Is(err, context.Canceled), errors.Is(err, foldtype.ErrClosed),
		errors.Is(err, foldtype.ErrNotRegistered), errors.Is(err, foldtype.ErrStreamNotFound),
		errors.Is(err, foldtype.ErrStreamGone), errors.Is(err, foldtype.ErrLeaseLost), parks(err),
		!foldtype.IsRetryable(err):
		return false
	}
	return true
}

// openEnded is told how a queued opening of key ended: a failure that is owed again queues it
// once more after its backoff; anything else forgets the key's backoff.
func (h *Host) openEnded(key procKey, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.reopen[key]
	if !owedAgain(err) || h.shutdown {
		if r != nil {
			r.stop()
			delete(h.reopen, key)
		}
		return
	}
	if r == nil {
		if h.reopen == nil {
			h.reopen = map[procKey]*openRetry{}
		}
		r = &openRetry{}
		h.reopen[key] = r
	} else {
		r.stop()
	}
	r.attempts++
	delay := openRetryDelay(r.attempts)
	h.log.Info("host: opening an engine again after its failure", "path", key.path, "slug", key.slug,
		"attempts", r.attempts, "next_retry_in", delay)
	r.stop = h.clock.AfterFunc(delay, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.shutdown || h.reopen[key] != r {
			return
		}
		if h.slots[key] == nil {
			h.queueOpenLocked(key)
		}
	})
}

// stopReopensLocked cancels every armed retry of an opening (the host is stopping). h.mu held.
func (h *Host) stopReopensLocked() {
	for k, r := range h.reopen {
		r.stop()
		delete(h.reopen, k)
	}
}

// retryCatchUpIfOwed arms a retry of sl's catch-up from the log when the attempts-th one failed
// with err for want of the database. A failure of the processor's own code is the failing
// processor's retry (host/failing.go), and one that parks it is not retried.
func (h *Host) retryCatchUpIfOwed(sl *slot, err error, attempts int) {
	if !owedAgain(err) {
		return
	}
	if pf, ok := sl.runner.(processFailer); ok && pf.ProcessFailure() != nil {
		return // failing: its own retry runs the catch-up
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown || sl.catchUpStop != nil {
		return
	}
	delay := openRetryDelay(attempts)
	h.log.Info("host: catching an engine up again after its failure", "path", sl.key.path, "slug", sl.key.slug,
		"attempts", attempts, "next_retry_in", delay)
	sl.catchUpStop = h.clock.AfterFunc(delay, func() { h.retryCatchUp(sl, attempts) })
}

// retryCatchUp is the armed retry of sl's catch-up (retryCatchUpIfOwed).
func (h *Host) retryCatchUp(sl *slot, attempts int) {
	h.mu.Lock()
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown {
		h.mu.Unlock()
		return
	}
	sl.catchUpStop = nil
	gen := sl.lease.Generation
	if !h.leases.valid(sl.key, gen) {
		// The lease ran out or changed hands: the node that holds it now runs the processor.
		h.mu.Unlock()
		h.leases.drop(sl.key, gen)
		h.leaseLost(sl.key)
		return
	}
	sl.refs++
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer h.release(sl)
		err := sl.runner.CatchUpFromLog(h.ctx)
		h.failed(sl, "catch-up", err)
		h.retryCatchUpIfOwed(sl, err, attempts+1)
	}()
}
