package host

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Skip, the parked events, redrive and discard (docs/operations.md#skip). A processor failing on
// one event holds every later event of its stream behind it; skip sets that event aside — parked,
// with its failure, in a table every node reads — and moves the processor on past it. Once the
// cause is fixed, redrive runs the parked events again; discard drops one for good.
//
// The engine does the moving (foldstream.Engine.SkipEvent and RedriveEvent, root skip.go, where
// the rule for the state is written); the host stores the rows, fenced by the processor's lease
// as its checkpoints and state rows are, so a node that froze past its lease parks, redrives and
// removes nothing.

// skipper and redriver are implemented by runners that can be moved past an event and run a
// parked event again (*foldstream.Engine does).
type skipper interface {
	SkipEvent(ctx context.Context, offset int64, park func(ctx context.Context, ev foldstream.Event) error) (foldstream.Event, error)
}

type redriver interface {
	RedriveEvent(ctx context.Context, ev foldstream.Event) error
}

// skipAnswer and redriveAnswer are the owner's JSON answers a forwarding node decodes.
type skipAnswer struct {
	Parked foldtype.ParkedEvent `json:"parked"`
}

// Skip moves a failing processor past the event it fails on (docs/operations.md#skip): the event
// is parked, with its failure, who skipped it (foldtype.OperatorRequestOf(ctx)) and reason, and
// the processor's checkpoint moves past it without its Reduce or ProcessEvent, so a restart does
// not run it again. The events behind it then run. Skip returns the parked event.
//
// A processor that is not failing on an event fails with CONFLICT, a paused one too (resume it;
// when it fails again, skip). Any node takes the verb, as RetryNow.
func (h *Host) Skip(ctx context.Context, path, slug, reason string) (foldtype.ParkedEvent, error) {
	return h.skip(ctx, path, slug, reason, foldtype.OperatorRequestOf(ctx).Actor, 0)
}

// skip is Skip by who; at, when not 0, is the offset the caller saw failing (the failure
// policy's): a processor failing elsewhere by then is left alone, and no other node is asked.
func (h *Host) skip(ctx context.Context, path, slug, reason, by string, at int64) (foldtype.ParkedEvent, error) {
	key := procKey{path, slug}
	var ans skipAnswer
	sl, err := h.acquireForOp(ctx, key, "skip", url.Values{"op": {"skip"}}, at == 0, &ans)
	if sl == nil {
		return ans.Parked, err
	}
	defer h.release(sl)
	sk, ok := sl.runner.(skipper)
	if !ok {
		return foldtype.ParkedEvent{}, notAnEngine(key, "skip")
	}
	h.mu.Lock()
	var f foldtype.ProcessorFailure
	if sl.failing != nil {
		f = *sl.failing
	}
	h.mu.Unlock()
	if f.Offset == 0 || (at != 0 && f.Offset != at) {
		return foldtype.ParkedEvent{}, foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
			"host: processor %q on %q is not failing on an event: there is nothing to skip", slug, path)
	}
	var row driver.ParkedEventRow
	_, err = sk.SkipEvent(ctx, f.Offset, func(ctx context.Context, ev foldstream.Event) error {
		row = driver.ParkedEventRow{Path: path, Slug: slug, Offset: ev.Offset, EventType: ev.Type, Code: string(f.Code),
			Message: f.Message, Attempts: f.Attempts, Node: h.leases.node, AtMs: h.clock.Now().UnixMilli(), By: by, Reason: reason}
		return h.store.Events().PutParkedEvent(ctx, row, rowFence(sl))
	})
	if err != nil {
		if errors.Is(err, foldtype.ErrLeaseLost) {
			return foldtype.ParkedEvent{}, h.lostLeaseOf(sl)
		}
		return foldtype.ParkedEvent{}, err
	}
	h.log.Info("host: processor skipped an event", "path", path, "slug", slug, "offset", row.Offset, "type", row.EventType,
		"code", row.Code, "by", by, "reason", reason)
	// The failure is passed: the row goes, and what waited behind the event runs now.
	h.recovered(sl)
	h.catchUpAfterOp(sl, "skip")
	return parkedEventOf(row), nil
}

// policySkip is the failure policy's skip of the event sl fails on (f), recorded in the audit as
// the failure policy's.
func (h *Host) policySkip(sl *slot, f foldtype.ProcessorFailure) {
	reason := fmt.Sprintf("failure policy: %d failed attempts in a row at offset %d (%s)", f.Attempts, f.Offset, f.Code)
	h.log.Warn("host: skipping a failing processor's event (its failure policy)", "path", sl.key.path, "slug", sl.key.slug,
		"attempts", f.Attempts, "offset", f.Offset, "code", f.Code)
	_, err := h.skip(h.ctx, sl.key.path, sl.key.slug, reason, "policy", f.Offset)
	outcome := "done"
	if err != nil {
		if errors.Is(err, ErrShutdown) || errors.Is(err, context.Canceled) || errors.Is(err, foldtype.ErrConflict) {
			return // shut down, or not failing there any more (healed, or skipped already)
		}
		h.log.Warn("host: the failure policy's skip failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		outcome = "refused: " + string(foldtype.CodeOf(err))
	}
	if err := h.RecordOp(h.ctx, foldtype.AuditEntry{Actor: "policy", Op: "skip", Path: sl.key.path, Slug: sl.key.slug,
		Reason: reason, Outcome: outcome}); err != nil && h.ctx.Err() == nil {
		h.log.Warn("host: storing the failure policy's skip in the audit failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
	}
}

// catchUpAfterOp runs, in the background with its own reference to sl, the catch-up a verb that
// moved the processor on starts: a failure there makes the processor failing again (at the next
// event), as after a retry.
func (h *Host) catchUpAfterOp(sl *slot, what string) {
	h.mu.Lock()
	if h.shutdown || h.slots[sl.key] != sl || sl.state != slotOpen {
		h.mu.Unlock()
		return
	}
	sl.refs++
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer h.release(sl)
		if err := sl.runner.CatchUpFromLog(h.ctx); err != nil {
			h.failed(sl, what, err)
		}
	}()
}

// acquireForOp returns the open slot of key on this node for the verb op. With none it returns
// nil and either the refusal or, when forward and another node runs the processor, that node's
// answer: asked with q, its JSON decoded into out (a nil error: the owner did it). A paused
// processor is CONFLICT: these verbs need its engine.
func (h *Host) acquireForOp(ctx context.Context, key procKey, op string, q url.Values, forward bool, out any) (*slot, error) {
	sl, err := h.acquire(ctx, key.path, key.slug, openForWork)
	var ee *elsewhereError
	switch {
	case err == nil:
		return sl, nil
	case errors.Is(err, foldtype.ErrProcessorPaused):
		return nil, foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": key.path, "slug": key.slug},
			"host: processor %q on %q is paused: resume it first, then %s", key.slug, key.path, op)
	case !forward:
		return nil, err
	case errors.As(err, &ee):
		return nil, h.askHolder(ctx, ee.lease, key, q, out)
	case errors.Is(err, foldtype.ErrNotRegistered):
		if done, oerr := h.askOwner(ctx, key, q, out); done || oerr != nil {
			return nil, oerr
		}
	}
	return nil, err
}

// notAnEngine is the CONFLICT of a verb on a runner that is not an engine (one given to Add).
func notAnEngine(key procKey, op string) error {
	return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": key.path, "slug": key.slug},
		"host: processor %q on %q is not an engine this host can %s", key.slug, key.path, op)
}

// parkedEventOf is the listing of a stored parked event.
func parkedEventOf(r driver.ParkedEventRow) foldtype.ParkedEvent {
	return foldtype.ParkedEvent{Offset: r.Offset, Type: r.EventType, Code: r.Code, Message: r.Message, Attempts: r.Attempts,
		Node: r.Node, At: time.UnixMilli(r.AtMs).UTC(), By: r.By, Reason: r.Reason}
}

// ParkedEvents returns the parked events of processor slug on path, by offset, from the
// database: any node answers, also when the processor's owner is dead or this node has no
// registration for it.
func (h *Host) ParkedEvents(ctx context.Context, path, slug string) ([]foldtype.ParkedEvent, error) {
	rows, err := h.store.Events().ParkedEvents(ctx, driver.ParkedEventQuery{Path: path, Slug: slug})
	if err != nil {
		return nil, err
	}
	out := make([]foldtype.ParkedEvent, 0, len(rows))
	for _, r := range rows {
		out = append(out, parkedEventOf(r))
	}
	return out, nil
}

// Redrive runs parked events of processor slug on path again (docs/operations.md#redrive), on
// the node that runs it, in offset order: each through its Reduce, at the state the processor has
// reached, and its ProcessEvent (foldstream.Engine.RedriveEvent). One that succeeds leaves the
// list; the first that fails stays parked with the new failure (one attempt more), the later ones
// are not run, and Redrive fails with PROCESSOR_FAILING describing it. offset 0 redrives every
// parked event, another offset that one only. With none parked it fails with CONFLICT; a paused
// processor too (resume it first). Any node takes the verb, as RetryNow.
func (h *Host) Redrive(ctx context.Context, path, slug string, offset int64) (foldtype.RedriveResult, error) {
	key := procKey{path, slug}
	q := url.Values{"op": {"redrive"}}
	if offset != 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	var res foldtype.RedriveResult
	sl, err := h.acquireForOp(ctx, key, "redrive", q, true, &res)
	if sl == nil {
		return res, err
	}
	defer h.release(sl)
	rd, ok := sl.runner.(redriver)
	if !ok {
		return res, notAnEngine(key, "redrive")
	}
	// One redrive or discard of a processor at a time: two would run one event twice.
	sl.parkMu.Lock()
	defer sl.parkMu.Unlock()
	rows, err := h.store.Events().ParkedEvents(ctx, driver.ParkedEventQuery{Path: path, Slug: slug, Offset: offset})
	if err != nil {
		return res, err
	}
	if len(rows) == 0 {
		return res, noParked(key, offset)
	}
	res.Redriven = []int64{}
	for _, r := range rows {
		page, err := h.store.Events().Stream(path).Read(ctx, r.Offset-1, 1)
		if err != nil {
			return res, err
		}
		if len(page.Events) == 0 || page.Events[0].Offset != r.Offset {
			return res, foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug, "offset": r.Offset},
				"host: parked event %d of %q on %q is no longer in the stream: discard it", r.Offset, slug, path)
		}
		err = rd.RedriveEvent(ctx, page.Events[0])
		if pe, failed := errors.AsType[*foldstream.ProcessEventError](err); failed {
			r.Code, r.Message, r.Attempts = string(pe.Code()), pe.Error(), r.Attempts+1
			r.Node, r.AtMs = h.leases.node, h.clock.Now().UnixMilli()
			if err := h.store.Events().PutParkedEvent(ctx, r, rowFence(sl)); err != nil {
				if errors.Is(err, foldtype.ErrLeaseLost) {
					return res, h.lostLeaseOf(sl)
				}
				return res, err
			}
			h.log.Warn("host: a redriven event failed; it stays parked", "path", path, "slug", slug, "offset", r.Offset,
				"code", r.Code, "attempts", r.Attempts, "err", pe.Err)
			return res, redriveFailed(key, r)
		}
		if err != nil {
			if errors.Is(err, foldtype.ErrLeaseLost) {
				return res, h.lostLeaseOf(sl)
			}
			return res, err
		}
		if _, err := h.store.Events().RemoveParkedEvent(ctx, path, slug, r.Offset, rowFence(sl)); err != nil {
			// The event ran: sent again, the redrive would run it again (at least once).
			if errors.Is(err, foldtype.ErrLeaseLost) {
				return res, h.lostLeaseOf(sl)
			}
			return res, err
		}
		res.Redriven = append(res.Redriven, r.Offset)
		h.log.Info("host: parked event redriven", "path", path, "slug", slug, "offset", r.Offset, "type", r.EventType)
	}
	return res, nil
}

// redriveFailed is the PROCESSOR_FAILING answer of a redrive whose event failed again: the
// failure, as a failing processor's reads describe theirs. The processor itself runs on.
func redriveFailed(key procKey, r driver.ParkedEventRow) *foldtype.Error {
	return &foldtype.Error{
		Code: foldtype.CodeProcessorFailing,
		Message: fmt.Sprintf("host: parked event %d of processor %q on %q failed again (%s: %s); it stays parked after %d attempts",
			r.Offset, key.slug, key.path, r.Code, r.Message, r.Attempts),
		Data: map[string]any{"slug": key.slug, "path": key.path, "code": r.Code, "message": r.Message,
			"offset": r.Offset, "attempts": r.Attempts},
		Retryable: true,
	}
}

// noParked is the CONFLICT of a verb on a parked event there is not.
func noParked(key procKey, offset int64) error {
	if offset == 0 {
		return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": key.path, "slug": key.slug},
			"host: processor %q on %q has no parked events", key.slug, key.path)
	}
	return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": key.path, "slug": key.slug, "offset": offset},
		"host: processor %q on %q has no parked event at offset %d", key.slug, key.path, offset)
}

// Discard removes the parked event at offset of processor slug on path without running it
// (docs/operations.md#discard). The node that runs the processor removes it, fenced by its
// lease and never while a redrive of it runs; when no node runs it, the node asked removes it.
// With none there it fails with CONFLICT.
func (h *Host) Discard(ctx context.Context, path, slug string, offset int64) error {
	key := procKey{path, slug}
	if offset <= 0 {
		return foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"path": path, "slug": slug},
			"host: discard needs the offset of a parked event")
	}
	h.mu.Lock()
	sl := h.slots[key]
	if sl != nil && (sl.state == slotOpen || sl.paused != nil) {
		h.mu.Unlock()
		sl.parkMu.Lock()
		removed, err := h.store.Events().RemoveParkedEvent(ctx, path, slug, offset, rowFence(sl))
		sl.parkMu.Unlock()
		if errors.Is(err, foldtype.ErrLeaseLost) {
			return h.lostLeaseOf(sl)
		}
		if err == nil && !removed {
			return noParked(key, offset)
		}
		return err
	}
	h.mu.Unlock()
	if done, err := h.askOwner(ctx, key, url.Values{"op": {"discard"}, "offset": {strconv.FormatInt(offset, 10)}}, nil); done || err != nil {
		return err
	}
	removed, err := h.store.Events().RemoveParkedEvent(ctx, path, slug, offset, nil)
	if err == nil && !removed {
		return noParked(key, offset)
	}
	return err
}
