package host

import (
	"fmt"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
)

// Failing processors (docs/store.md#failing-processors): a ProcessEvent that returns an error or
// panics leaves the engine's cursor before its event. The host marks that one processor failing,
// stops feeding it pushes (the events stay in the log) and retries it from the log with backoff
// on the store's clock: FailRetryBase doubling up to FailRetryMax, for as long as it fails. Its reads
// answer PROCESSOR_FAILING with the failure; its status says "failing" with the code, message,
// offset, attempts and next retry. Other processors, on this stream and others, are not touched.

// Retry backoff of a failing processor.
const (
	// FailRetryBase is the delay before the first retry of a failing processor.
	FailRetryBase = time.Second
	// FailRetryMax caps the delay between retries.
	FailRetryMax = 5 * time.Minute
)

// failRetryDelay is the delay after the attempts-th failure in a row.
func failRetryDelay(attempts int) time.Duration {
	d := FailRetryBase
	for i := 1; i < attempts && d < FailRetryMax; i++ {
		d *= 2
	}
	return min(d, FailRetryMax)
}

// processFailer is implemented by runners that report their last ProcessEvent failure
// (*foldstream.Engine does).
type processFailer interface {
	ProcessFailure() *foldstream.ProcessEventError
}

// The host's failing record follows the engine: the engine clears its failure when it commits a
// range (the failing event ran again and succeeded, whoever asked: a push, a read's catch-up, a
// WaitUntilProcessed, the timed retry), and the host drops its record as soon as it looks — on
// every read, every push and every status — rather than at its next timed retry. So a processor
// that healed answers at once.

// failing marks sl failing after its engine's ProcessEvent failed (f) and arms the next retry. The
// stack is logged once per distinct failure (code, message and offset). A failure the engine got
// past meanwhile (its ProcessFailure no longer f) is not recorded.
func (h *Host) failing(sl *slot, f *foldstream.ProcessEventError) {
	h.mu.Lock()
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown {
		h.mu.Unlock()
		return
	}
	if pf, ok := sl.runner.(processFailer); ok && pf.ProcessFailure() != f {
		// The engine ran the event again meanwhile (a read's catch-up): healed, or failing
		// anew, which that run's own caller records.
		h.mu.Unlock()
		return
	}
	if sl.failing != nil && sl.retryStop != nil {
		// A unit queued before the failure was noted failed the same way: the armed retry stands.
		h.mu.Unlock()
		return
	}
	attempts := 1
	if sl.failing != nil {
		attempts = sl.failing.Attempts + 1
	} else {
		sl.policyFails = 0
	}
	delay := failRetryDelay(attempts)
	code := f.Code()
	// A failure because the store could not be reached (a database restart, say) is the store's,
	// not the processor's: it does not bring the failure policy closer, which would otherwise
	// pause the processor, or skip its event, for a database blip.
	counted := !storeFailure(code)
	if counted {
		sl.policyFails++
	}
	policyFails := sl.policyFails
	sl.failing = &foldtype.ProcessorFailure{Code: code, Message: f.Error(), Offset: f.Offset,
		Attempts: attempts, NextRetry: h.clock.Now().Add(delay)}
	sl.isFailing.Store(true)
	if sl.retryStop != nil {
		sl.retryStop()
	}
	sl.retryStop = h.clock.AfterFunc(delay, func() { h.retryFailing(sl) })
	key := fmt.Sprintf("%s\x00%s\x00%d", code, f.Err, f.Offset)
	first := key != sl.failKey
	sl.failKey = key
	rec := *sl.failing
	h.mu.Unlock()
	// Stored where every node reads it (host/pause.go), and paused when the policy says so.
	h.syncFailureRow(sl)
	if counted {
		h.applyPolicy(sl, rec, policyFails)
	}
	if first {
		args := []any{"path", sl.key.path, "slug", sl.key.slug, "code", code, "offset", f.Offset,
			"attempts", attempts, "next_retry_in", delay, "err", f.Err}
		if f.Stack != nil {
			args = append(args, "stack", string(f.Stack))
		}
		// The message names the failure, so distinct failures are never folded together.
		h.log.Error(fmt.Sprintf("host: processor %q on %q is failing: %v", sl.key.slug, sl.key.path, f), args...)
	}
}

// retryFailing is a failing slot's retry: a catch-up from the log, which runs the failing event
// again. Success clears the failure; another failure arms the next retry. After a success the
// engine catches up once more: the pushes that came while the first catch-up ran were held
// (followEngine) and their events lie past what it read; with no later append or read on the
// stream nothing else would run them (a no-op read when there were none).
func (h *Host) retryFailing(sl *slot) {
	h.mu.Lock()
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown || sl.failing == nil {
		h.mu.Unlock()
		return
	}
	sl.retryStop = nil
	h.startRetryLocked(sl, func() {
		err := sl.runner.CatchUpFromLog(h.ctx)
		if err == nil {
			h.recovered(sl)
			err = sl.runner.CatchUpFromLog(h.ctx)
		}
		h.failed(sl, "retry", err)
	})
}

// startRetryLocked runs attempt, a retry of sl's engine, in the background with a reference to sl,
// when this node still holds sl's lease. When the lease ran out or changed hands, the node that
// holds it now runs the processor (and its retries), and running its events here could repeat
// their effects: the lease is dropped instead. Called with h.mu held; returns with it released.
func (h *Host) startRetryLocked(sl *slot, attempt func()) {
	gen := sl.lease.Generation
	if !h.leases.valid(sl.key, gen) {
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
		attempt()
	}()
}

// retryStoreFailures brings forward the retry of every processor failing because the store could
// not be reached (storeFailure): the store says anything may have changed — on a shared database
// its listener lost or regained its connection — so the database may be back, and such a
// processor retries now rather than at its backoff, which the outage's failed attempts doubled
// (a processor whose retries during a database restart had reached 16 s resumed that late).
// A retry that fails again arms its backoff as any failure does. The armed catch-up retries of
// engines behind the log (host/catchupretry.go) run now too.
func (h *Host) retryStoreFailures() {
	var due []*slot
	h.mu.Lock()
	if !h.shutdown {
		now := h.clock.Now()
		for _, sl := range h.slots {
			if sl.state != slotOpen || sl.failing == nil || sl.retryStop == nil || !storeFailure(sl.failing.Code) {
				continue
			}
			if sl.retryStop() { // else it fired already: its attempt is about to run
				sl.retryStop = nil
				sl.failing.NextRetry = now
				due = append(due, sl)
			}
		}
	}
	behind := h.catchUpsDueLocked()
	h.mu.Unlock()
	for _, sl := range due {
		h.retryFailing(sl)
	}
	for _, sl := range behind {
		h.retryCatchUp(sl)
	}
}

// storeFailure reports whether a ProcessEvent failure of code came from the store being out of
// reach rather than from the processor.
func storeFailure(code foldtype.Code) bool {
	return code == foldtype.CodeUnavailable || code == foldtype.CodeCommitOutcomeUnknown
}

// recovered clears sl's failure after an attempt that succeeded.
func (h *Host) recovered(sl *slot) {
	h.mu.Lock()
	f := h.clearFailingLocked(sl)
	h.mu.Unlock()
	h.logRecovered(sl, f)
	h.syncFailureRow(sl)
	h.caughtUpAgain(sl) // the attempt read the log
}

// clearFailingLocked drops sl's failing record and its armed retry, returning the record. h.mu held.
func (h *Host) clearFailingLocked(sl *slot) *foldtype.ProcessorFailure {
	f := sl.failing
	sl.failing, sl.failKey = nil, ""
	sl.isFailing.Store(false)
	sl.stopRetryLocked()
	return f
}

func (h *Host) logRecovered(sl *slot, f *foldtype.ProcessorFailure) {
	if f != nil {
		h.log.Info("host: processor recovered", "path", sl.key.path, "slug", sl.key.slug, "offset", f.Offset, "attempts", f.Attempts)
	}
}

// healedLocked reports whether sl is recorded failing while its engine has no failure any more: the
// engine ran the failing event again, successfully, on a path other than the timed retry. h.mu held.
func healedLocked(sl *slot) bool {
	if sl.failing == nil || sl.runner == nil {
		return false
	}
	pf, ok := sl.runner.(processFailer)
	return ok && pf.ProcessFailure() == nil
}

// followEngine drops sl's failing record when its engine healed, and reports whether sl is still
// failing.
func (h *Host) followEngine(sl *slot) (failing bool) {
	if !h.isFailing(sl) {
		return false
	}
	h.mu.Lock()
	if !healedLocked(sl) {
		failing = sl.failing != nil
		h.mu.Unlock()
		return failing
	}
	f := h.clearFailingLocked(sl)
	h.mu.Unlock()
	h.logRecovered(sl, f)
	h.syncFailureRow(sl)
	return false
}

// isFailing reports whether sl is failing (its pushes wait for the retry), without the host's lock:
// it runs on every push.
func (h *Host) isFailing(sl *slot) bool { return sl.isFailing.Load() }

// failingError is the PROCESSOR_FAILING error reads of a failing slot answer. Its Data holds
// "slug", "path", "code", "message", "offset", "attempts" and "nextRetry" (RFC 3339).
func failingError(key procKey, f *foldtype.ProcessorFailure) *foldtype.Error {
	return &foldtype.Error{
		Code: foldtype.CodeProcessorFailing,
		Message: fmt.Sprintf("host: processor %q on %q is failing at offset %d (%s: %s); %d attempts so far, next retry at %s",
			key.slug, key.path, f.Offset, f.Code, f.Message, f.Attempts, f.NextRetry.UTC().Format(time.RFC3339)),
		Data: map[string]any{"slug": key.slug, "path": key.path, "code": string(f.Code), "message": f.Message,
			"offset": f.Offset, "attempts": f.Attempts, "nextRetry": f.NextRetry.UTC().Format(time.RFC3339Nano)},
		Retryable: true,
	}
}
