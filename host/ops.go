package host

import (
	"context"
	"net/url"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Operator verbs (docs/operations.md): transitions of a processor's failure state that an
// operator asks for. This slice has one: RetryNow.

// RetryNow makes a failing processor's next attempt run now instead of at its backoff time
// (docs/operations.md#retry-now). The attempt is the same catch-up from the log the armed retry
// would run: success clears the failure, another failure counts one more attempt and arms the
// next retry with the backoff that attempt count gives. RetryNow returns once the attempt is
// started, not when it ends; the processor's status tells how it went.
//
// A processor that is not failing but whose catch-up from the log waits for its retry
// (docs/store.md#an-engine-behind-the-log) has that catch-up run now. Any other processor that is
// not failing fails with CONFLICT. A processor another node runs — also one
// this node has no registration for — is asked of that node when its lease names an address, with
// the caller's Authorization header and reason (which the server puts in ctx with
// foldtype.WithOperatorRequest); when it names none, RetryNow fails with CONFLICT naming
// the node.
func (h *Host) RetryNow(ctx context.Context, path, slug string) error {
	key := procKey{path, slug}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return ErrShutdown
	}
	reg := h.registrationFor(path, slug)
	sl := h.slots[key]
	if sl != nil && sl.state == slotOpen && h.slots[key] == sl {
		if sl.failing == nil && sl.catchUp != nil && sl.catchUp.stop != nil {
			// Not failing, but behind the log, its catch-up waiting for its retry
			// (host/catchupretry.go): that retry runs now, unless it fired already and its
			// attempt is about to run.
			due := h.catchUpDueLocked(sl)
			h.mu.Unlock()
			if due {
				h.retryCatchUp(sl)
			}
			return nil
		}
		if sl.failing == nil {
			h.mu.Unlock()
			return notFailing(path, slug)
		}
		if sl.retryStop == nil {
			// An attempt is running now (no retry armed): it is the one asked for.
			h.mu.Unlock()
			return nil
		}
		stopped := sl.retryStop()
		sl.retryStop = nil
		if !stopped {
			// The armed retry fired already and its attempt is about to run: that is the one
			// asked for. Starting another would run two attempts at once.
			h.mu.Unlock()
			return nil
		}
		// The record says now: the status shows the attempt as due at once.
		sl.failing.NextRetry = h.clock.Now()
		h.mu.Unlock()
		h.retryFailing(sl)
		return nil
	}
	h.mu.Unlock()
	if done, err := h.askOwner(ctx, key, url.Values{"op": {"retry"}}, nil); done || err != nil {
		return err
	}
	if reg == nil {
		return notRegistered(path, slug)
	}
	return notFailing(path, slug)
}

// ownerOf returns the live lease of key: from this node's view of the leases, or, for a processor
// it does not follow (not registered here), from the database.
func (h *Host) ownerOf(ctx context.Context, key procKey) (driver.Lease, bool, error) {
	if l, ok := h.leases.owner(key); ok {
		return l, true, nil
	}
	ls, err := h.leases.drv.Leases(ctx, driver.LeaseQuery{Prefix: leasePrefix, Keys: []string{leaseKey(key)}, Live: true})
	if err != nil {
		return driver.Lease{}, false, err
	}
	for _, l := range ls {
		if l.Key == leaseKey(key) {
			return l, true, nil
		}
	}
	return driver.Lease{}, false, nil
}

// notFailing is the CONFLICT of a verb that needs a failing processor.
func notFailing(path, slug string) error {
	return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
		"host: processor %q on %q is not failing: there is nothing to retry", slug, path)
}

func ownerUnreachable(path, slug string) error {
	return foldtype.NewError(foldtype.CodeUnavailable, map[string]any{"path": path, "slug": slug},
		"host: the node that runs processor %q on %q did not answer; try again", slug, path)
}
