package kernel

import (
	"context"
	"sync/atomic"
)

// Holds (docs/store.md#the-kernel-and-its-layers): a feature whose one operation on a stream takes
// several writes — each committed in whatever group the writer runs, so other streams' writes
// commit between them — holds the stream for their length (huge records hold a stream while one
// record is written in slices). While a stream is held, every other write that reaches it is
// parked in the writer, not refused, and runs once the hold ends; writes to other streams are not
// affected, and the writer keeps the held stream's entry in memory.

// Hold keeps one stream for one owner across several writes.
type Hold struct {
	Path string // the held stream
	// Owner is the layer's value behind the hold (huge records: their *sliced.Record).
	Owner any
	// Finish, when set, writes the record of the owner's own append to the held stream in place of
	// the kernel's insert (WriteRecord, WriteBytes) and reports true, or reports false to leave the
	// record to the kernel.
	Finish func(t *Tx, m *StreamState, after, through int64) (bool, error)
	// Release undoes, in the write of whoever finds the hold abandoned, what its owner left in
	// the database; that write then ends the hold and proceeds.
	Release func(t *Tx) error
	// Abandoned is set by the owner when it could not end the hold (its last write failed).
	Abandoned atomic.Bool
}

// heldError is a write that reached a stream another write holds: the writer parks it until the
// hold ends.
type heldError struct{ path string }

func (e *heldError) Error() string {
	return "stream store: stream " + e.path + " is held by a write in several steps"
}

// heldBy returns the hold on path (committed or staged in this group), or nil.
func (t *Tx) heldBy(path string) *Hold {
	if h := t.g.held[path]; h != nil {
		return h
	}
	return t.s.ws.held[path]
}

// checkHeld refuses (parks) a write to a stream another write holds. A stream whose hold was
// abandoned is released in this write, which then proceeds.
func (t *Tx) checkHeld(path string) error {
	h := t.heldBy(path)
	if h == nil || h == t.holding {
		return nil
	}
	if !h.Abandoned.Load() {
		return &heldError{path: path}
	}
	if err := h.Release(t); err != nil {
		return err
	}
	t.EndHold(h)
	return nil
}

// StartHold holds h's stream once this write and its group commit.
func (t *Tx) StartHold(h *Hold) { t.holdStart = h }

// EndHold ends the hold h once this write and its group commit.
func (t *Tx) EndHold(h *Hold) { t.holdEnds = append(t.holdEnds, h) }

// WriteHolding is Write for the owner of hold h: its functions may touch the held stream.
func (s *Store) WriteHolding(ctx context.Context, h *Hold, fn func(t *Tx) error) error {
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1), holding: h}
	if err := s.enqueue(ctx, req); err != nil {
		return err
	}
	return s.classifyStorageErr(<-req.done)
}

// finishHeld lets the owner of the hold this write function holds write the record (after,
// through] of m itself (Hold.Finish); it reports false when the kernel writes it.
func (t *Tx) finishHeld(m *StreamState, after, through int64) (bool, error) {
	if h := t.holding; h != nil && h.Finish != nil {
		return h.Finish(t, m, after, through)
	}
	return false, nil
}

// parkedWrite is a write waiting for the hold on path to end.
type parkedWrite struct {
	path string
	req  *writeReq
}

// releaseParked moves the parked writes whose stream is no longer held to the front of the
// writer's queue.
func (s *Store) releaseParked() {
	ws := &s.ws
	kept := ws.parked[:0]
	for _, p := range ws.parked {
		if ws.held[p.path] != nil {
			kept = append(kept, p)
			continue
		}
		ws.requeue = append(ws.requeue, p.req)
	}
	clear(ws.parked[len(kept):])
	ws.parked = kept
}

// refuseParked answers every parked write with ErrStoreClosed: the writer is stopping and the
// holds they wait for will not end in this process.
func (s *Store) refuseParked() {
	for _, p := range s.ws.parked {
		p.req.done <- ErrStoreClosed
	}
	s.ws.parked = nil
}
