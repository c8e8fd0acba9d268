package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// errBound is the cause of a read context that ended at its bound (not the caller's).
var errBound = errors.New("host: read bound passed")

// catchingUp is the CATCHING_UP error of a read that gave up at its bound. Its Data holds
// "offset" (the processor's reduced-through offset then), "slug" and "path".
func catchingUp(key procKey, offset int64, cause error) *foldtype.Error {
	return &foldtype.Error{
		Code: foldtype.CodeCatchingUp,
		Message: fmt.Sprintf("host: processor %q on %q is catching up (at offset %d); retry later",
			key.slug, key.path, offset),
		Data:      map[string]any{"offset": offset, "slug": key.slug, "path": key.path},
		Retryable: true,
		Err:       cause,
	}
}

// read runs fn on the open engine of processor slug on path within bound on the host's clock: past
// it the read fails with CATCHING_UP. With settle, fn runs with read-your-writes (every push the
// subscription owed when the call began is delivered first, docs/store.md#reads) and
// after the opening catch-up finished.
//
// When another node runs the processor, remote answers instead (with the lease that node holds).
func (h *Host) read(ctx context.Context, path, slug string, bound time.Duration, settle bool, fn func(ctx context.Context, r foldtype.Runner) error,
	remote func(ctx context.Context, l driver.Lease) error) error {
	key := procKey{path, slug}
	bctx, cancel := context.WithCancelCause(ctx)
	stop := h.clock.AfterFunc(bound, func() { cancel(errBound) })
	defer func() {
		stop()
		cancel(nil)
	}()
	// Past its bound the read answers CATCHING_UP, also when the caller's own deadline fires just
	// after (the server's bound is as long as the host's by default): the bound's cause is bctx's
	// for good once it fired first, so the answer does not depend on which the read sees last. A
	// caller whose context ended first gets its own error.
	atBound := func() bool { return errors.Is(context.Cause(bctx), errBound) }
	for {
		sl, err := h.acquire(bctx, path, slug, openForRead)
		var ee *elsewhereError
		if errors.As(err, &ee) {
			if err = remote(bctx, ee.lease); err == nil {
				return nil
			}
		}
		if errors.Is(err, ErrNotRegistered) {
			// A stream that does not exist says so, whatever runs on it.
			if _, herr := h.store.Events().HeadStream(ctx, path); errors.Is(herr, foldtype.ErrStreamNotFound) || errors.Is(herr, foldtype.ErrStreamGone) {
				err = herr
			}
		}
		if err != nil {
			if atBound() && !errors.Is(err, foldtype.ErrCatchingUp) {
				return catchingUp(key, 0, err)
			}
			return err
		}
		retry, err := h.readOn(bctx, sl, settle, atBound, fn)
		h.release(sl)
		if !retry {
			return err
		}
	}
}

// readOn is one attempt of read on the acquired slot sl. It asks for a retry when sl's stream
// turned out to be deleted and created again: the slot that replaces it answers.
func (h *Host) readOn(ctx context.Context, sl *slot, settle bool, atBound func() bool, fn func(ctx context.Context, r foldtype.Runner) error) (retry bool, err error) {
	check := func() (bool, error) {
		h.followEngine(sl) // a failure the engine got past (this read's own catch-up, say) is over
		h.mu.Lock()
		defer h.mu.Unlock()
		if sl.stale {
			return true, nil
		}
		if sl.parked != nil {
			return false, sl.parked
		}
		if sl.failing != nil {
			return false, failingError(sl.key, sl.failing)
		}
		return false, nil
	}
	fail := func(err error) (bool, error) {
		h.failed(sl, "read", err)
		if errors.Is(err, foldtype.ErrStreamDeleted) {
			// The engine follows a deleted stream; a new one at the path resets it now.
			h.created(sl.key.path)
		}
		if retry, perr := check(); retry || perr != nil {
			return retry, perr
		}
		if atBound() {
			return false, catchingUp(sl.key, sl.runner.ReducedThroughOffset(), err)
		}
		return false, err
	}
	if settle {
		// Before the wait: every consumed event up to seen.Through is delivered by its end, and
		// none lies in (seen.After, seen.Through].
		seen := sl.sub.SeenRange()
		if err := sl.sub.WaitDelivered(ctx); err != nil && !errors.Is(err, stream.ErrSubscriptionClosed) {
			if errors.Is(err, foldtype.ErrStreamDeleted) {
				// The stream was deleted; if the path holds a new stream already, the slot is
				// reset now (the store's creation notice may still be on its way) and the read
				// goes to the fresh engine.
				h.created(sl.key.path)
			}
			return fail(err)
		}
		select {
		case <-sl.caughtUp:
		case <-ctx.Done():
			return fail(context.Cause(ctx))
		}
		// A failing processor answers at once: moving its cursor would run the failing event
		// again, outside its backoff.
		if retry, perr := check(); retry || perr != nil {
			return retry, perr
		}
		if err := h.catchUpShared(ctx, sl); errors.Is(err, errRecreated) {
			return true, nil // the slot that replaces it answers
		} else if err != nil {
			return fail(err)
		}
		// Read-your-writes by offset: commits the processor does not consume ride inside its next
		// push, so its cursor may lag appends that returned before the call. Everything it
		// consumes up to seen.Through was delivered, so an empty push moves the cursor there (no
		// log read) — from seen.After at the lowest: a delivery that failed or was skipped left
		// the cursor below the last consumed commit, or an opening catch-up that failed left it
		// below the commits made before the subscription began, and the engine reads the log up
		// to it first.
		if cur := sl.runner.ReducedThroughOffset(); seen.Through > cur {
			if err := sl.runner.ProcessEventBatch(ctx, nil, foldtype.ScannedRange{After: max(cur, seen.After), Through: seen.Through}); err != nil {
				return fail(err)
			}
		}
	}
	// A push delivered meanwhile may have parked the processor or shown its stream re-created.
	if retry, perr := check(); retry || perr != nil {
		return retry, perr
	}
	if !h.leases.valid(sl.key, sl.lease.Generation) {
		// The lease ran out (or changed hands) before this node noticed: its engine may be
		// behind the node that runs the processor now, so the read goes there.
		h.leases.drop(sl.key, sl.lease.Generation)
		h.leaseLost(sl.key)
		return true, nil
	}
	if err := fn(ctx, sl.runner); err != nil {
		return fail(err)
	}
	// fn may have run the failing event again (WaitUntilProcessed's catch-up): the answer it gave
	// holds for the next read too.
	h.followEngine(sl)
	return false, nil
}

// Snapshot returns processor slug's cursor and state on the stream at path, with read-your-writes:
// it reflects every append that returned before the call. It waits at most Config.MaxWait for a
// processor that is catching up, then fails with CATCHING_UP (see [ErrCatchingUp]); a parked
// processor fails with PROCESSOR_PARKED. Under a pattern it opens the stream's engine when it is
// closed; a stream that does not exist is NOT_REGISTERED. Do not call it from inside the same
// processor's batch.
func (h *Host) Snapshot(ctx context.Context, path, slug string) (foldtype.Snapshot[json.RawMessage], error) {
	var snap foldtype.Snapshot[json.RawMessage]
	err := h.read(ctx, path, slug, h.cfg.MaxWait, true, func(ctx context.Context, r foldtype.Runner) error {
		var err error
		snap, err = r.SnapshotJSON(ctx)
		return err
	}, func(ctx context.Context, l driver.Lease) error {
		var err error
		snap, err = h.remoteSnapshot(ctx, l, path, slug)
		return err
	})
	if err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, err
	}
	return snap, nil
}

// LiveSnapshot returns processor slug's live state {rev, state} on the stream at path, with
// read-your-writes and the bound of Snapshot. Clients seed from it and apply live-state deltas
// whose from equals the held rev (docs/engine.md, "Live state").
func (h *Host) LiveSnapshot(ctx context.Context, path, slug string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	var live foldtype.LiveSnapshot[json.RawMessage]
	err := h.read(ctx, path, slug, h.cfg.MaxWait, true, func(ctx context.Context, r foldtype.Runner) error {
		var err error
		live, err = r.LiveSnapshot(ctx)
		return err
	}, func(ctx context.Context, l driver.Lease) error {
		var err error
		live, err = h.remoteLiveSnapshot(ctx, l, path, slug)
		return err
	})
	if err != nil {
		return foldtype.LiveSnapshot[json.RawMessage]{}, err
	}
	return live, nil
}

// WaitUntilProcessed waits until processor slug on the stream at path reduced through offset.
// timeout (0 means foldstream.DefaultWaitTimeout) is capped at Config.MaxWait; when it passes the
// call fails with CATCHING_UP (see [ErrCatchingUp]; the error also matches
// foldtype.ErrProcessTimeout), or earlier when ctx ends.
func (h *Host) WaitUntilProcessed(ctx context.Context, path, slug string, offset int64, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = foldstream.DefaultWaitTimeout
	}
	timeout = min(timeout, h.cfg.MaxWait)
	key := procKey{path, slug}
	// The engine's own timeout ends the wait; the read's bound is a backstop a little later, for
	// the time spent opening the engine.
	err := h.read(ctx, path, slug, timeout+time.Second, false, func(ctx context.Context, r foldtype.Runner) error {
		err := r.WaitUntilProcessed(ctx, offset, timeout)
		if errors.Is(err, foldtype.ErrProcessTimeout) {
			return catchingUp(key, r.ReducedThroughOffset(), err)
		}
		return err
	}, func(ctx context.Context, l driver.Lease) error {
		return h.remoteWait(ctx, l, path, slug, offset, timeout)
	})
	return err
}
