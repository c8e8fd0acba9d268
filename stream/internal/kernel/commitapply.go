package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// After a group commits: what it changed (rows, records, ephemerals) reaches the other nodes'
// listeners (notifyAll, in the transaction), this node's caches and feeds (applyCommitted), and
// the writes' after-commit hooks.

// changesOf collects the streams the committed functions touched and the ephemeral events they
// appended per stream.
func changesOf(done []*Tx) (map[int64]string, map[int64][]foldtype.Event) {
	touched := make(map[int64]string)
	var ephs map[int64][]foldtype.Event
	for _, t := range done {
		if t == nil {
			continue
		}
		for id, p := range t.touched {
			touched[id] = p
		}
		for id, evs := range t.eph {
			if ephs == nil {
				ephs = make(map[int64][]foldtype.Event)
			}
			ephs[id] = append(ephs[id], evs...)
		}
	}
	return touched, ephs
}

// recordsOf collects the durable records the committed functions appended per stream (shared
// databases), in the order they ran.
func recordsOf(done []*Tx) map[int64][]driver.Record {
	var recs map[int64][]driver.Record
	for _, t := range done {
		if t == nil {
			continue
		}
		for id, rs := range t.recs {
			if recs == nil {
				recs = make(map[int64][]driver.Record)
			}
			recs[id] = append(recs[id], rs...)
		}
	}
	return recs
}

// notifyAll queues one notification per touched stream in dtx, with the stream's ephemeral events
// and, when rows has the stream, its row after the group and the records the group appended.
func notifyAll(ctx context.Context, dtx driver.WriteTx, touched map[int64]string, ephs map[int64][]foldtype.Event,
	rows map[int64]*driver.Stream, recs map[int64][]driver.Record) error {
	for id, p := range touched {
		n := driver.Notification{StreamID: id, Path: p}
		if r := rows[id]; r != nil {
			n.Stream, n.Records = r, recs[id]
		}
		if evs := ephs[id]; len(evs) > 0 {
			n.Ephemeral, _ = json.Marshal(evs) // events always marshal: their fields are raw JSON
		}
		if err := dtx.Notify(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// notifyCommitted sends, in a transaction of their own, the notifications of writes an early
// commit made durable when the rest of their group failed. It is best effort: when it fails, the
// other processes' readers of those streams learn of the writes with the next notification.
func (s *Store) notifyCommitted(ctx context.Context, w driver.Writer, touched map[int64]string, ephs map[int64][]foldtype.Event) {
	if len(touched) == 0 || s.exclusive {
		return
	}
	dtx, err := w.Begin(ctx)
	if err == nil {
		if err = notifyAll(ctx, dtx, touched, ephs, nil, nil); err == nil {
			err = dtx.Commit(ctx)
		}
		if err != nil {
			_ = dtx.Rollback(ctx)
		}
	}
	if err != nil {
		s.log.Warn("stream store: could not notify other processes of committed writes whose group failed later",
			"streams", len(touched), "err", err)
	}
}

// applyCommitted applies the committed functions' staged changes to the writer's state in queue
// order, runs their after-commit hooks, parks the writes that met a held stream, answers the
// rest and wakes readers. done[i] is nil for every function that is not committed. rows and recs
// (nil: not known) bring the tail cache up to the commit before the callers are answered.
func (s *Store) applyCommitted(reqs []*writeReq, results []error, done []*Tx, rows map[int64]*driver.Stream, recs map[int64][]driver.Record) {
	ws := &s.ws
	touched, _ := changesOf(done)
	for _, t := range done {
		if t == nil {
			continue
		}
		for p, m := range t.staged {
			if m == nil {
				ws.streams.remove(p)
				continue
			}
			ws.streams.put(p, m)
			for _, applied := range s.hooks.applied {
				applied(p, m)
			}
		}
		// Before the hooks: a delete later in the group forgets the mark in its own hook.
		for id := range t.marks {
			ws.marks.add(id)
		}
		if h := t.holdStart; h != nil {
			if ws.held == nil {
				ws.held = make(map[string]*Hold)
			}
			ws.held[h.Path] = h
		}
		for _, h := range t.holdEnds {
			if ws.held[h.Path] == h {
				delete(ws.held, h.Path)
			}
		}
	}
	// A write that found its stream held is not answered: it waits, and runs again once the hold
	// ended (or did not start after all: its group failed).
	for i, r := range reqs {
		var he *heldError
		if errors.As(results[i], &he) {
			ws.parked = append(ws.parked, parkedWrite{path: he.path, req: r})
			results[i] = errParked
		} else if errors.Is(results[i], errInflight) {
			// The group it met has finished by now (it finishes before this one).
			ws.requeue = append(ws.requeue, r)
			results[i] = errParked
		} else if s.staleRetry(results[i]) {
			// It relied on the writer's entry of a stream another process has written since:
			// it runs again, reading the row under the lock.
			ws.requeue = append(ws.requeue, r)
			results[i] = errParked
		}
	}
	if len(ws.parked) > 0 {
		s.releaseParked()
	}
	for _, t := range done {
		if t == nil {
			continue
		}
		for _, h := range t.hooks {
			s.runHook(h)
		}
	}
	// The tail cache reaches the commit before any caller is answered (a caller reads its own
	// write), but the waiting readers are woken after the answers: the goroutine readied last
	// runs next on this thread once the writer waits again, so the reader goes first, with no
	// thread to wake in between, and the callers' answers go to an idle thread.
	var wakes []chan struct{}
	for id, p := range touched {
		if ch := s.takeWaiters(id, rows[id], recs[id]); ch != nil {
			wakes = append(wakes, ch)
		}
		s.changes.Notify(p)
	}
	// A caller answered now queues its next write, if any, after this count moved on (gather).
	answered := 0
	for i := range reqs {
		if results[i] != errParked {
			answered++
		}
	}
	ws.answered, ws.answeredAt = answered, time.Now()
	s.answers.Add(1)
	for i, r := range reqs {
		if results[i] != errParked {
			r.done <- results[i]
		}
	}
	for _, ch := range wakes {
		close(ch)
	}
}

// runHook runs one after-commit hook. A panic in it is recovered and logged: the group is
// committed and its callers are answered as usual, and the writer goroutine — every write of the
// store — survives a fault in one hook.
func (s *Store) runHook(h func()) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("stream store: an after-commit hook panicked; the write is committed",
				"panic", p, "stack", string(debug.Stack()))
		}
	}()
	h()
}

// rowsAfter returns each touched stream's row after the group, from the group's staged state:
// nil for a stream the group deleted or did not stage.
func (s *Store) rowsAfter(g *group, touched map[int64]string) map[int64]*driver.Stream {
	rows := make(map[int64]*driver.Stream, len(touched))
	for id, p := range touched {
		m := g.staged[p]
		if m == nil || m.Row.ID != id {
			continue
		}
		r := m.Row
		r.Tail = m.Tail
		rows[id] = &r
	}
	return rows
}
