package foldstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// What an engine answers its readers: snapshots with read-your-writes (gate), the live state and
// its deltas, and waits until an offset is processed.

func (e *Engine[S]) reducedThroughShownHead() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.hasPushed && !e.hasHeadRead {
		return false
	}
	head := e.pushedThrough
	if e.hasHeadRead {
		head = max(head, e.headRead)
	}
	return e.pubCursor >= head
}

func (e *Engine[S]) gate(ctx context.Context) error {
	if e.isClosed() {
		return e.closedError()
	}
	if e.reducedThroughShownHead() {
		return nil
	}
	return e.CatchUpFromLog(ctx)
}

// Snapshot returns the cursor and state, catching up from the log first unless the engine has
// reduced through the shown head (docs/engine.md#reading-the-state).
func (e *Engine[S]) Snapshot(ctx context.Context) (Snapshot[S], error) {
	if err := e.gate(ctx); err != nil {
		return Snapshot[S]{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return Snapshot[S]{Offset: e.pubCursor, State: e.pubState}, nil
}

// SnapshotJSON is Snapshot with the state as JSON, the shape a host hands out. It fails when the
// state does not serialize.
func (e *Engine[S]) SnapshotJSON(ctx context.Context) (Snapshot[json.RawMessage], error) {
	s, err := e.Snapshot(ctx)
	if err != nil {
		return Snapshot[json.RawMessage]{}, err
	}
	var b []byte
	err = callGuarded(func() (merr error) { b, merr = marshalJSON(s.State); return merr })
	if err != nil {
		return Snapshot[json.RawMessage]{}, fmt.Errorf("engine %q: marshal state: %w", e.c.Slug(), err)
	}
	return Snapshot[json.RawMessage]{Offset: s.Offset, State: b}, nil
}

// LiveSnapshot returns the live state's {rev, state} after the same gate as Snapshot. It fails when
// the current projection does not serialize to JSON.
func (e *Engine[S]) LiveSnapshot(ctx context.Context) (foldtype.LiveSnapshot[json.RawMessage], error) {
	if err := e.gate(ctx); err != nil {
		return foldtype.LiveSnapshot[json.RawMessage]{}, err
	}
	return e.live.SnapshotJSON()
}

func (e *Engine[S]) project(state S) (v any, err error) {
	err = callGuarded(func() error {
		var perr error
		v, perr = e.p.ProjectLiveState(state)
		return perr
	})
	if err != nil {
		report(e.rep, SiteLiveState, err, slog.String("slug", e.c.Slug()))
	}
	return v, err
}

// PublishLiveState re-projects the reduced state into the live state (docs/engine.md#live-state).
// A failing projection is reported and only this notification is lost.
func (e *Engine[S]) PublishLiveState() {
	// One publish at a time, so a host's publish of an older state can never land after the
	// chain's publish of a newer one.
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	e.mu.Lock()
	state, closed := e.state, e.closed
	changed, whole, declaring := e.liveChanged, e.liveWhole, e.declaring
	e.liveChanged, e.liveWhole = nil, false
	e.mu.Unlock()
	if closed {
		return
	}
	v, err := e.project(state)
	if err != nil {
		// The held view stays the last published one: keep what changed since for the next publish.
		e.mu.Lock()
		e.liveChanged, e.liveWhole = append(changed, e.liveChanged...), e.liveWhole || whole
		e.mu.Unlock()
		return
	}
	if whole || !declaring {
		e.liveGen = e.live.set(v)
		return
	}
	e.liveGen = e.live.setChangedSince(e.liveGen, v, changed)
}

// WaitUntilProcessed waits until the cursor reaches offset (docs/engine.md#reading-the-state). It
// starts a catch-up without waiting for it; if that fails first, it fails with the catch-up's
// error. On timeout it fails with code PROCESS_TIMEOUT and `processor "<slug>" did not reach offset <n> in <ms>ms`.
func (e *Engine[S]) WaitUntilProcessed(ctx context.Context, offset int64, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return e.closedError()
	}
	if e.pubCursor >= offset {
		e.mu.Unlock()
		return nil
	}
	w := &waiter{offset: offset, ch: make(chan struct{})}
	e.waiters[w] = struct{}{}
	e.mu.Unlock()
	remove := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		_, ok := e.waiters[w]
		delete(e.waiters, w)
		return ok
	}
	catchUp := e.enqueue(context.WithoutCancel(ctx), e.runCatchUp)
	timedOut := make(chan struct{})
	stop := e.clock.AfterFunc(timeout, func() { close(timedOut) })
	defer stop()
	for {
		select {
		case <-w.ch:
			return nil
		case err := <-catchUp:
			catchUp = nil
			if err != nil && remove() {
				return err
			}
		case <-timedOut:
			if !remove() {
				return nil // resolved concurrently
			}
			return foldtype.NewError(foldtype.CodeProcessTimeout, map[string]any{"slug": e.c.Slug(), "offset": offset},
				"processor %s did not reach offset %d in %dms", quoteJSON(e.c.Slug()), offset, timeout.Milliseconds())
		case <-ctx.Done():
			if !remove() {
				return nil
			}
			return ctx.Err()
		case <-e.closing.Done():
			if !remove() {
				return nil
			}
			return e.closedError()
		}
	}
}

// Drain waits until the serial chain is idle, every background attempt settled, and the claim and
// live-state chains settled, or ctx ends.
func (e *Engine[S]) Drain(ctx context.Context) error {
	for {
		e.mu.Lock()
		busy := e.running || len(e.queue) > 0 || e.inFlight > 0
		changed, claims := e.changed, e.claimTail
		e.mu.Unlock()
		if busy {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-claims:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := e.live.Wait(ctx); err != nil {
			return err
		}
		e.mu.Lock()
		quiet := !e.running && len(e.queue) == 0 && e.inFlight == 0 && e.claimTail == claims
		e.mu.Unlock()
		if quiet && e.live.idle() {
			return nil
		}
	}
}
