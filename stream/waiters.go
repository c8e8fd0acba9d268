package stream

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
)

// Event waiters (docs/store.md#reading): wait for the first event on a stream that matches
// a type filter. Waiters are resolved on the writer goroutine right after a commit lands and before
// the commit is fanned out to subscribers, in registration order; resolving only hands the event
// over, so a waiter that appends in response queues behind the commit that woke it.

// WaitOptions configures [Store.WaitForEvent].
type WaitOptions struct {
	// Types filters by event type; empty matches every event, ephemerals included.
	Types []string
	// After, when set, also searches history: the first matching event with offset > *After
	// (durable events from the log, ephemerals from the ring), paging as needed; when none exists
	// yet, the first later one. When nil, the waiter waits for the next matching event committed
	// after the call.
	After *int64
	// Timeout fails the wait with [foldstream.CodeWaitTimeout] when no event matched in time (on
	// the store's clock); 0 waits until ctx ends.
	Timeout time.Duration
}

type eventWaiter struct {
	types []string
	after int64 // match only offsets > after (-1: any fresh event)
	ch    chan foldstream.Event
}

type waiterSet struct {
	mu     sync.Mutex
	byPath map[string][]*eventWaiter
	// registered, when set (tests), receives a signal after each waiter is registered.
	registered chan struct{}
}

func (w *eventWaiter) matches(ev foldstream.Event) bool {
	return ev.Offset > w.after && (len(w.types) == 0 || slices.Contains(w.types, ev.Type))
}

// WaitForEvent returns the first event on the stream at path that matches opts. A timeout writes
// nothing and fails with WAIT_TIMEOUT.
func (s *Store) WaitForEvent(ctx context.Context, path string, opts WaitOptions) (foldstream.Event, error) {
	if s.closed.Load() {
		return foldstream.Event{}, ErrStoreClosed
	}
	if !s.exclusive {
		if _, err := s.ensureFeed(ctx, path); err != nil {
			return foldstream.Event{}, err
		}
	}
	w := &eventWaiter{types: slices.Clone(opts.Types), after: -1, ch: make(chan foldstream.Event, 1)}
	if opts.After != nil {
		w.after = max(*opts.After, 0)
	}
	ws := &s.ev.waiters
	ws.mu.Lock()
	if ws.byPath == nil {
		ws.byPath = make(map[string][]*eventWaiter)
	}
	ws.byPath[path] = append(ws.byPath[path], w)
	registered := ws.registered
	ws.mu.Unlock()
	defer s.removeWaiter(path, w)
	if registered != nil {
		registered <- struct{}{}
	}

	if opts.After != nil {
		// Registered first, then history: an event committed in between is seen by one or both,
		// and history's answer, the earlier one, wins.
		if ev, ok, err := s.findInHistory(ctx, path, w); err != nil {
			return foldstream.Event{}, err
		} else if ok {
			return ev, nil
		}
	}
	var timeout chan struct{}
	if opts.Timeout > 0 {
		timeout = make(chan struct{})
		stop := s.clock.AfterFunc(opts.Timeout, func() { close(timeout) })
		defer stop()
	}
	select {
	case ev := <-w.ch:
		return ev, nil
	case <-timeout:
		return foldstream.Event{}, foldstream.NewError(foldstream.CodeWaitTimeout,
			map[string]any{"path": path, "timeoutMs": opts.Timeout.Milliseconds()},
			"wait for event on %s: no matching event in %dms", quotePath(path), opts.Timeout.Milliseconds())
	case <-ctx.Done():
		return foldstream.Event{}, ctx.Err()
	case <-s.stop:
		return foldstream.Event{}, ErrStoreClosed
	}
}

func (s *Store) findInHistory(ctx context.Context, path string, w *eventWaiter) (foldstream.Event, bool, error) {
	after := w.after
	for {
		p, err := s.Read(ctx, path, after, MaxReadLimit, ReadOptions{IncludeEphemeral: true})
		if err != nil {
			return foldstream.Event{}, false, err
		}
		for _, ev := range p.Events {
			if w.matches(ev) {
				return ev, true, nil
			}
		}
		if p.AtHead || p.ScannedThroughOffset <= after {
			return foldstream.Event{}, false, nil
		}
		after = p.ScannedThroughOffset
	}
}

func (s *Store) removeWaiter(path string, w *eventWaiter) {
	ws := &s.ev.waiters
	ws.mu.Lock()
	defer ws.mu.Unlock()
	list := ws.byPath[path]
	if i := slices.Index(list, w); i >= 0 {
		list = slices.Delete(slices.Clone(list), i, i+1)
	}
	if len(list) == 0 {
		delete(ws.byPath, path)
	} else {
		ws.byPath[path] = list
	}
}

// resolveWaiters hands a landed commit's events to the stream's waiters, in registration order.
// Runs on the writer goroutine; never blocks.
func (s *Store) resolveWaiters(path string, events []foldstream.Event) {
	ws := &s.ev.waiters
	ws.mu.Lock()
	list := ws.byPath[path]
	if len(list) == 0 {
		ws.mu.Unlock()
		return
	}
	var keep []*eventWaiter
	for _, w := range list {
		resolved := false
		for _, ev := range events {
			if w.matches(ev) {
				w.ch <- ev // buffered, and each waiter is resolved at most once
				resolved = true
				break
			}
		}
		if !resolved {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		delete(ws.byPath, path)
	} else {
		ws.byPath[path] = keep
	}
	ws.mu.Unlock()
}
