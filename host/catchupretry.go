package host

import (
	"context"
	"errors"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Catch-up retries (docs/store.md#an-engine-behind-the-log): an engine verb that failed for a
// reason other than a ProcessEvent — the opening catch-up could not read the log, a push's
// checkpoint did not go through — leaves the engine below events it was offered, or below the
// events committed before its subscription began. Nothing else may move it: a stream nobody
// appends to or reads sends no push. So the host marks the slot behind and retries the catch-up
// from the log on the store's clock, FailRetryBase doubling up to FailRetryMax, until one
// succeeds; a notice from the store that anything may have changed (retryStoreFailures) brings
// the retry forward. An idle engine marked behind reads the log before it closes. A processor
// whose ProcessEvent fails is the failing retry's (host/failing.go), which reads the log too.

// catchUpLogRead is ProcessorStoreWait.Write of a catch-up retry waiting for the database.
const catchUpLogRead = "log read"

// catchUpRetry is the record of a slot's catch-up that failed and waits for its retry (h.mu).
type catchUpRetry struct {
	err       error
	attempts  int
	since     time.Time
	nextRetry time.Time
	stop      func() bool // nil while an attempt runs
}

// catchUpLater marks sl behind after an engine verb (what) failed with err, not a ProcessEvent
// failure, when err may have left the engine below the log (leavesBehind), and arms a retry of its
// catch-up unless one is armed or running. It reports whether it armed one (and logged the
// failure).
func (h *Host) catchUpLater(sl *slot, what string, err error) (armed bool) {
	if !leavesBehind(what, err) {
		return false
	}
	sl.behind.Store(true)
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown || sl.failing != nil {
		return false
	}
	r := sl.catchUp
	if r == nil {
		r = &catchUpRetry{since: h.clock.Now()}
		sl.catchUp = r
	} else if r.stop != nil {
		r.err = err // the armed retry stands
		return false
	}
	r.err = err
	r.attempts++
	delay := failRetryDelay(r.attempts)
	r.nextRetry = h.clock.Now().Add(delay)
	r.stop = h.clock.AfterFunc(delay, func() { h.retryCatchUp(sl) })
	h.log.Warn("host: processor "+what+" failed; its catch-up from the log runs again later", "path", sl.key.path, "slug", sl.key.slug,
		"code", foldtype.CodeOf(err), "attempts", r.attempts, "next_retry_in", delay, "err", err)
	return true
}

// leavesBehind reports whether an engine verb (what) that failed with err may have left the engine
// below the log with nothing to move it. A read's own limits (its wait ran out, the processor is
// failing, paused or catching up) say nothing of the engine, whose catch-up goes on; a read that
// failed because the store could not be reached may have stopped the catch-up that read ran. Any
// other verb (the opening catch-up, a push, a revive, a retry) failed in the engine's own work,
// unless the stream is gone (a new one at the path resets the slot) or the engine closed.
func leavesBehind(what string, err error) bool {
	code := foldtype.CodeOf(err)
	if what == "read" {
		return storeFailure(code)
	}
	switch code {
	case foldtype.CodeStreamDeleted, foldtype.CodeStreamNotFound, foldtype.CodeStreamGone, foldtype.CodeClosed:
		return false
	}
	return !errors.Is(err, context.DeadlineExceeded)
}

// retryCatchUp is the armed retry of sl's catch-up.
func (h *Host) retryCatchUp(sl *slot) {
	h.mu.Lock()
	r := sl.catchUp
	if sl.state != slotOpen || h.slots[sl.key] != sl || h.shutdown || r == nil {
		h.mu.Unlock()
		return
	}
	r.stop = nil
	if sl.failing != nil {
		// The failing retry reads the log; its success clears the mark (recovered).
		h.mu.Unlock()
		return
	}
	h.startRetryLocked(sl, func() {
		if err := sl.runner.CatchUpFromLog(h.ctx); err != nil {
			h.failed(sl, "catch-up retry", err)
			return
		}
		h.caughtUpAgain(sl)
	})
}

// caughtUpAgain clears sl's behind mark after a catch-up from the log succeeded, unless another
// failure armed a retry meanwhile.
func (h *Host) caughtUpAgain(sl *slot) {
	h.mu.Lock()
	r := sl.catchUp
	if r != nil && r.stop != nil {
		h.mu.Unlock()
		return
	}
	sl.catchUp = nil
	sl.behind.Store(false)
	h.mu.Unlock()
	if r != nil {
		h.log.Info("host: processor caught up with the log again", "path", sl.key.path, "slug", sl.key.slug,
			"attempts", r.attempts, "waited", h.clock.Now().Sub(r.since))
	}
}

// stopCatchUpLocked cancels sl's armed catch-up retry, if any, keeping the behind mark. h.mu held.
func (sl *slot) stopCatchUpLocked() {
	if sl.catchUp != nil && sl.catchUp.stop != nil {
		sl.catchUp.stop()
		sl.catchUp.stop = nil
	}
}

// catchUpDueLocked takes sl's armed catch-up retry out of its timer, so the caller runs it now
// (retryCatchUp), and reports whether it did: false when none is armed, or when it fired already
// and its attempt is about to run. h.mu held.
func (h *Host) catchUpDueLocked(sl *slot) bool {
	r := sl.catchUp
	if sl.state != slotOpen || r == nil || r.stop == nil {
		return false
	}
	if !r.stop() {
		return false // retryCatchUp clears stop when it runs
	}
	r.stop = nil
	r.nextRetry = h.clock.Now()
	return true
}

// catchUpsDueLocked is catchUpDueLocked over every slot, returning the slots whose retry the
// caller runs now. h.mu held.
func (h *Host) catchUpsDueLocked() []*slot {
	var due []*slot
	for _, sl := range h.slots {
		if h.catchUpDueLocked(sl) {
			due = append(due, sl)
		}
	}
	return due
}

// catchUpWaitLocked is sl's catch-up retry as the status shows it: a log read waiting for the
// store's database, when the store could not be reached; nil otherwise. h.mu held.
func catchUpWaitLocked(sl *slot) *foldtype.ProcessorStoreWait {
	r := sl.catchUp
	if r == nil || r.err == nil || !storeFailure(foldtype.CodeOf(r.err)) {
		return nil
	}
	return &foldtype.ProcessorStoreWait{Write: catchUpLogRead, Code: foldtype.CodeOf(r.err), Message: r.err.Error(),
		Attempts: r.attempts, Since: r.since, NextRetry: r.nextRetry}
}
