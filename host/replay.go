package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// replayer is implemented by runners that replay from the log on the operator's word
// (*foldstream.Engine does).
type replayer interface {
	Replay(ctx context.Context, req foldtype.ReplayRequest) (foldtype.ReplayResult, error)
}

// Replay rebuilds processor slug's state on path from the log (docs/operations.md#replay). The
// engine folds the log into a new checkpoint in one fenced write; with effects none (the
// default) it folds everything the processor has processed and no ProcessEvent runs again; with
// effects again its checkpoint goes back to req.From-1 and the events from req.From on run through
// ProcessEvent again, with their effects. Replay returns when the checkpoint is written; the
// catch-up that runs the rest (the replayed range with effects again, and every event after the
// processor's previous offset) runs in the background, as a failing processor's retry does, and
// its failure makes the processor failing.
//
// Only the node that holds the processor's lease replays it: on a node that does not — also one
// that has no registration for it — Replay asks the owner at the address its lease names, with
// the caller's Authorization and reason (foldtype.WithOperatorRequest), and returns the owner's
// answer; when the lease names none it fails with CONFLICT naming the node. A processor this
// node may run but no node runs now is opened here (its lease taken) to replay it.
func (h *Host) Replay(ctx context.Context, path, slug string, req foldtype.ReplayRequest) (foldtype.ReplayResult, error) {
	req, err := foldtype.CheckReplay(req)
	if err != nil {
		return foldtype.ReplayResult{}, err
	}
	sl, err := h.acquire(ctx, path, slug, openForWork)
	var ee *elsewhereError
	switch {
	case errors.As(err, &ee):
		var res foldtype.ReplayResult
		err := h.askHolder(ctx, ee.lease, procKey{path, slug}, replayQuery(req), &res)
		return res, err
	case errors.Is(err, foldtype.ErrNotRegistered):
		var res foldtype.ReplayResult
		if done, oerr := h.askOwner(ctx, procKey{path, slug}, replayQuery(req), &res); done || oerr != nil {
			return res, oerr
		}
		return foldtype.ReplayResult{}, err
	case err != nil:
		return foldtype.ReplayResult{}, err
	}
	rp, ok := sl.runner.(replayer)
	if !ok {
		h.release(sl)
		return foldtype.ReplayResult{}, foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
			"host: processor %q on %q is not an engine this host can replay", slug, path)
	}
	res, err := rp.Replay(ctx, req)
	if err != nil && ctx.Err() == nil {
		h.release(sl) // refused: nothing was written
		return foldtype.ReplayResult{}, err
	}
	if err == nil {
		h.log.Info("host: processor replayed", "path", path, "slug", slug, "from", res.From, "through", res.Through,
			"effects", string(res.Effects), "reduced", res.Reduced)
	}
	// The rest runs now: the replayed range (effects again) and what waited behind the old
	// offset (also a failing processor's event, which then fails or heals as a retry would). It
	// runs also when the caller stopped waiting: the replay may have been written all the same.
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		h.release(sl)
		return res, err
	}
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer h.release(sl)
		if err := sl.runner.CatchUpFromLog(h.ctx); err != nil {
			h.failed(sl, "replay", err)
			return
		}
		h.mu.Lock()
		failing := sl.failing != nil
		h.mu.Unlock()
		if failing {
			h.recovered(sl)
		}
	}()
	return res, err
}

// replayQuery is the query of a replay asked of the owner.
func replayQuery(req foldtype.ReplayRequest) url.Values {
	return url.Values{"op": {"replay"}, "from": {strconv.FormatInt(req.From, 10)}, "effects": {string(req.Effects)}}
}

// askOwner asks the node that holds key's lease, when another node does, to run the verb q names
// (postToOwner): done says it was asked (err is its answer). With no live owner elsewhere, done
// is false.
func (h *Host) askOwner(ctx context.Context, key procKey, q url.Values, out any) (done bool, err error) {
	l, ok, err := h.ownerOf(ctx, key)
	if err != nil {
		return true, err
	}
	if !ok || !l.Live || l.Holder == h.leases.node || !time.Now().Before(l.Expires) {
		return false, nil
	}
	return true, h.askHolder(ctx, l, key, q, out)
}

// askHolder asks the node that holds l to run the verb q names (postToOwner); when l names no
// address to ask, it fails with CONFLICT naming the node. A verb another node forwarded here is
// not passed on again: it fails with UNAVAILABLE (retryable).
func (h *Host) askHolder(ctx context.Context, l driver.Lease, key procKey, q url.Values, out any) error {
	if by := foldtype.OperatorRequestOf(ctx).ForwardedBy; by != "" {
		// Asked by a node that believes this one runs it: the two nodes' views of the lease
		// disagree (one is behind a move). Passing it on could send it round between them.
		return foldtype.NewError(foldtype.CodeUnavailable, map[string]any{"path": key.path, "slug": key.slug, "node": l.Holder},
			"host: processor %q on %q runs on node %s, not here, where node %s sent the verb; the nodes' views of its lease disagree: try again",
			key.slug, key.path, l.Holder, by)
	}
	if !h.forwardable(l) {
		op := q.Get("op")
		return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": key.path, "slug": key.slug, "node": l.Holder},
			"host: processor %q on %q runs on node %s, which gives no address to ask: %s it there", key.slug, key.path, l.Holder, op)
	}
	return h.postToOwner(ctx, l.Addr, key.path, key.slug, q, out)
}

// postToOwner POSTs an operator's verb (q holds op and its parameters) to the owner at addr, passing
// on the operator's Authorization and reason, and decodes its JSON answer into out (nil: none
// wanted). A coded refusal comes back with its code; no answer is UNAVAILABLE.
func (h *Host) postToOwner(ctx context.Context, addr, path, slug string, q url.Values, out any) error {
	or := foldtype.OperatorRequestOf(ctx)
	if or.Reason != "" {
		q.Set("reason", or.Reason)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.ownerURL(addr, path, slug, q), nil)
	if err != nil {
		return fmt.Errorf("host: ask the owner: %w", err)
	}
	if or.Authorization != "" {
		req.Header.Set("Authorization", or.Authorization)
	}
	req.Header.Set(foldtype.HeaderForwardedOp, h.leases.node)
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return ownerUnreachable(path, slug)
	}
	defer resp.Body.Close()
	if resp.Header.Get(foldtype.HeaderOpRecorded) != "" && or.Recorded != nil {
		or.Recorded() // the owner stored the audit record of the verb it took
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ownerUnreachable(path, slug)
	}
	if resp.StatusCode/100 == 2 {
		if out != nil {
			if err := json.Unmarshal(body, out); err != nil {
				return ownerUnreachable(path, slug)
			}
		}
		return nil
	}
	if code := foldtype.Code(resp.Header.Get("Foldstream-Error-Code")); code != "" {
		return foldtype.NewError(code, map[string]any{"path": path, "slug": slug},
			"host: the node that runs processor %q on %q answered %s", slug, path, code)
	}
	return ownerUnreachable(path, slug)
}
