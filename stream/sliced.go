package stream

import (
	"context"
	"errors"
	"fmt"
	"github.com/foldstream/foldstream/stream/internal/kernel"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
)

// Huge records are written in slices over several transactions (docs/store.md#huge-records).
//
// A protocol append whose body is longer than slicedRecordBytes would otherwise hold the writer
// for its whole insert and one long commit, and every other write of the store would wait behind
// it. Instead the append reserves its stream, writes its record's slices one per write function
// (each in whatever group the writer is running, so other streams' writes commit between them),
// and then runs the append itself, which writes the last slice, the producer state and the rest in
// one transaction. The slices already written are hidden from readers by the driver's visibility
// mark (driver.HidingTx) until that last transaction clears it, so nobody ever sees half a record;
// a crash in between leaves hidden slices that the driver drops when the store opens again.
//
// The reservation is a hold of the kernel (hold.go): while a stream is reserved, every other write
// that touches it waits (parked in the writer, not refused) and runs once the reservation ends;
// writes to other streams are not affected. The reservation writes its append's record itself
// (hold.finish) and drops the hidden slices of an abandoned one (hold.release).

// slicedRecordBytes is the body size above which a protocol append is written in slices.
const slicedRecordBytes = 1 << 20

// reservation is a huge record being written into one stream.
type reservation struct {
	kernel.Hold // the hold on the stream; its path is the reserved stream
	json        bool
	msgs        []rawjson.Message // JSON messages (json), all without idempotency keys
	body        []byte            // the bytes (byte streams)
	producer    *ProducerHeaders
	createdMs   int64

	// Set by the reserving write, on the writer goroutine.
	id          int64
	recordStart int64
	after       int64
	through     int64
	slices      []driver.Record
	written     int  // slices inserted so far
	used        bool // the append's own transaction wrote the rest and cleared the mark

	// afterSlice, when set (tests), runs on the appending goroutine after each hidden slice
	// committed, with the number written so far.
	afterSlice func(written int)
}

// errNotSliced makes AppendRecord write the record the usual way (in one transaction): the stream
// or the request is not one the sliced path handles, and the usual path gives the right answer.
var errNotSliced = errors.New("stream store: not a sliced append")

// planSliced returns the reservation for a huge append, or nil when the append is written in one
// transaction: small, on a driver without a visibility mark, a close, or JSON messages that need
// the idempotency check.
func (s *Store) planSliced(req AppendRequest, msgs []rawjson.Message, msgErr error) *reservation {
	if !s.exclusive || len(req.Body) <= slicedRecordBytes || req.Close || req.HasExpectedTail || req.StreamSeq != "" {
		return nil
	}
	r := &reservation{producer: req.Producer}
	r.Path, r.Owner = req.Path, r
	r.Finish = func(t *kernel.Tx, m *kernel.StreamState, after, through int64) (bool, error) {
		return s.finishSliced(t, r, m, after, through)
	}
	// The next write to a stream whose reservation was abandoned drops the hidden slices itself.
	r.Release = func(t *kernel.Tx) error { return dropHiddenSlices(t, r.id) }
	if IsJSONContentType(req.ContentType) {
		if msgErr != nil || len(msgs) == 0 {
			return nil
		}
		for i := range msgs {
			if _, key := eventKeyOf(&msgs[i]); key != "" {
				return nil
			}
		}
		r.json, r.msgs = true, msgs
	} else {
		r.body = req.Body
	}
	return r
}

// appendSliced writes a huge append in slices. ok is false when the append must take the usual
// path (nothing was written).
func (s *Store) appendSliced(ctx context.Context, req AppendRequest, msgs []rawjson.Message, msgErr error, r *reservation) (res AppendResult, ok bool, err error) {
	if err := s.k.WriteHolding(ctx, &r.Hold, func(t *kernel.Tx) error { return s.reserve(t, r) }); err != nil {
		return AppendResult{}, false, nil
	}
	// From here on the stream is reserved: whatever happens, end the reservation.
	for {
		if r.afterSlice != nil {
			r.afterSlice(r.written)
		}
		if r.written >= len(r.slices)-1 {
			break
		}
		if err = s.k.WriteHolding(ctx, &r.Hold, func(t *kernel.Tx) error { return s.writeSlice(t, r) }); err != nil {
			break
		}
	}
	if err == nil {
		err = s.k.WriteHolding(ctx, &r.Hold, func(t *kernel.Tx) error {
			var gap int64
			var e error
			res, e = s.appendTx(t, req, msgs, msgErr, &gap)
			if e == nil && !r.used {
				e = fmt.Errorf("stream store: a sliced append of %s was not written", r.Path) // cannot happen
			}
			if e == nil {
				t.EndHold(&r.Hold)
			}
			return e
		})
		if err == nil {
			return res, true, nil
		}
	}
	s.dropReservation(ctx, r)
	return AppendResult{}, true, err
}

// reserve checks the stream, fixes the record's positions, sets the visibility mark and writes the
// first slice.
func (s *Store) reserve(t *kernel.Tx, r *reservation) error {
	m, err := s.liveStream(t, r.Path)
	if err != nil {
		return errNotSliced
	}
	if m.Row.Closed || IsJSONContentType(m.Row.ContentType) != r.json {
		return errNotSliced
	}
	if p := r.producer; p != nil {
		// Only the plain next seq takes the sliced path: a duplicate, a gap or a new epoch are
		// answered by the usual path without writing the record.
		st, known, err := t.Producer(m, p.ID)
		if err != nil || !known || p.Epoch != st.Epoch || p.Seq != st.LastSeq+1 {
			return errNotSliced
		}
	}
	dtx, err := t.Begin()
	if err != nil {
		return err
	}
	h, ok := dtx.(driver.HidingTx)
	if !ok {
		return errNotSliced
	}
	r.id, r.recordStart, r.createdMs = m.Row.ID, m.Tail, t.Now().UnixMilli()
	if r.json {
		r.after = m.HighestAssigned
		r.slices, r.through = jsonSlices(r.id, r.recordStart, r.after, r.createdMs, r.msgs)
	} else {
		r.after = m.Tail
		r.slices, r.through = byteSlices(r.id, r.recordStart, r.createdMs, r.body)
	}
	r.written = 0
	if err := h.HideFrom(t.Context(), r.id, m.Tail); err != nil {
		return err
	}
	if err := s.writeSlice(t, r); err != nil {
		return err
	}
	t.StartHold(&r.Hold)
	return nil
}

// writeSlice inserts the reservation's next slice (hidden).
func (s *Store) writeSlice(t *kernel.Tx, r *reservation) error {
	if m, ok := t.CachedStream(r.Path); !ok || m.Row.ID != r.id {
		return notLive(streamMissing, r.Path) // deleted meanwhile (expiry collection)
	}
	if err := t.Context().Err(); err != nil {
		return err
	}
	if err := t.Driver().InsertRecord(t.Context(), r.slices[r.written]); err != nil {
		return err
	}
	n := r.written + 1
	t.AfterCommit(func() { r.written = max(r.written, n) })
	return nil
}

// finishSliced is writeRecord and writeBytes for the stream reservation r holds (its hold.finish):
// it inserts the slices not yet written, clears the visibility mark and moves the marks. It
// reports false when m is not the reserved stream at the reserved position (the caller then
// writes as usual).
func (s *Store) finishSliced(t *kernel.Tx, r *reservation, m *kernel.StreamState, after, through int64) (bool, error) {
	if r.used || r.Path != m.Row.Path || r.id != m.Row.ID {
		return false, nil
	}
	if r.recordStart != m.Tail || r.after != after || r.through != through {
		return true, fmt.Errorf("stream store: the reserved record of %s moved (%d, %d] → (%d, %d]", r.Path, r.after, r.through, after, through)
	}
	dtx, err := t.Begin()
	if err != nil {
		return true, err
	}
	h, ok := dtx.(driver.HidingTx)
	if !ok {
		return true, fmt.Errorf("stream store: the driver lost its visibility mark")
	}
	for _, rec := range r.slices[r.written:] {
		if err := t.Context().Err(); err != nil {
			return true, err
		}
		if err := t.Driver().InsertRecord(t.Context(), rec); err != nil {
			return true, err
		}
	}
	if err := h.ShowAll(t.Context(), r.id); err != nil {
		return true, err
	}
	r.used = true
	m.Tail = through
	m.HighestAssigned = max(m.HighestAssigned, through)
	t.PersistAccess(m)
	t.Changed(m.Row.ID, m.Row.Path)
	return true, nil
}

// dropReservation ends a reservation whose append failed: the hidden slices go, the mark is
// cleared, and the parked writes run. When even that fails, the reservation is abandoned and the
// next write to the stream drops the slices itself.
func (s *Store) dropReservation(ctx context.Context, r *reservation) {
	err := s.k.WriteHolding(context.WithoutCancel(ctx), &r.Hold, func(t *kernel.Tx) error {
		if err := dropHiddenSlices(t, r.id); err != nil {
			return err
		}
		t.EndHold(&r.Hold)
		return nil
	})
	if err != nil {
		r.Abandoned.Store(true)
		s.log.Warn("stream store: a failed huge append left hidden slices; the next write to the stream drops them",
			"path", r.Path, "err", err)
	}
}

func dropHiddenSlices(t *kernel.Tx, id int64) error {
	dtx, err := t.Begin()
	if err != nil {
		return err
	}
	h, ok := dtx.(driver.HidingTx)
	if !ok {
		return fmt.Errorf("stream store: the driver lost its visibility mark")
	}
	return h.DropHidden(t.Context(), id)
}

// jsonSlices cuts keyless JSON messages taking the offsets after+1, after+2, ... into record
// slices of at most recordSliceBytes (a longer message is a slice of its own).
func jsonSlices(id, recordStart, after, createdMs int64, msgs []rawjson.Message) ([]driver.Record, int64) {
	var out []driver.Record
	var rec *driver.Record
	prev := after
	for i := range msgs {
		msg := msgs[i].Raw
		if rec != nil && len(rec.Body)+1+len(msg) > kernel.RecordSliceBytes {
			rec.End = prev
			out = append(out, *rec)
			rec = nil
		}
		if rec == nil {
			rec = &driver.Record{StreamID: id, RecordStart: recordStart, Start: prev, CreatedMs: createdMs,
				Body: make([]byte, 0, min(kernel.RecordSliceBytes, max(len(msg), kernel.RecordSliceBytes/4)))}
		} else {
			rec.Body = append(rec.Body, ',')
		}
		rec.Frames = driver.AppendFrame(rec.Frames, 1, len(msg))
		rec.Body = append(rec.Body, msg...)
		prev++
	}
	if rec != nil {
		rec.End = prev
		out = append(out, *rec)
	}
	return out, prev
}

// byteSlices cuts a byte record starting at position start into slices of recordSliceBytes.
func byteSlices(id, start, createdMs int64, body []byte) ([]driver.Record, int64) {
	var out []driver.Record
	pos := start
	for len(body) > 0 {
		n := min(len(body), kernel.RecordSliceBytes)
		out = append(out, driver.Record{StreamID: id, RecordStart: start, Start: pos, End: pos + int64(n), CreatedMs: createdMs, Body: body[:n]})
		pos += int64(n)
		body = body[n:]
	}
	return out, pos
}

// reservationOf returns the reservation the write function holds, or nil.
func reservationOf(t *kernel.Tx) *reservation {
	if h := t.Holding(); h != nil {
		r, _ := h.Owner.(*reservation)
		return r
	}
	return nil
}
