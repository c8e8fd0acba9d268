// Package sliced writes huge records in slices over several transactions
// (docs/store.md#huge-records), a layer on the stream kernel (package kernel): a record is a hold
// of the kernel's on its stream, and the kernel's insert path hands the record's own append to it.
//
// A protocol append whose body is longer than Bytes would otherwise hold the writer for its whole
// insert and one long commit, and every other write of the store would wait behind it. Instead the
// append reserves its stream, writes its record's slices one per write function (each in whatever
// group the writer is running, so other streams' writes commit between them), and then runs the
// append itself, which writes the last slice, the producer state and the rest in one transaction.
// The slices already written are hidden from readers by the driver's visibility mark
// (driver.HidingTx) until that last transaction clears it, so nobody ever sees half a record; a
// crash in between leaves hidden slices that the driver drops when the store opens again.
//
// The reservation is a kernel.Hold: while a stream is reserved, every other write that touches it
// waits (parked in the writer, not refused) and runs once the reservation ends; writes to other
// streams are not affected. The reservation writes its append's record itself (Hold.Finish) and
// drops the hidden slices of an abandoned one (Hold.Release).
package sliced

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Bytes is the body size above which a protocol append is written in slices.
const Bytes = 1 << 20

// ErrNotSliced reports a stream or a request the sliced path does not handle: the caller writes
// the record the usual way (in one transaction), which gives the right answer.
var ErrNotSliced = errors.New("stream store: not a sliced append")

// Record is a huge record being written into one stream: keyless JSON messages, or bytes.
type Record struct {
	hold kernel.Hold // the hold on the stream; its path is the reserved stream
	json bool
	msgs []rawjson.Message // JSON messages (json), all without idempotency keys
	body []byte            // the bytes (byte streams)

	// Set by the reserving write, on the writer goroutine.
	id          int64
	recordStart int64
	after       int64
	through     int64
	createdMs   int64
	slices      []driver.Record
	written     int  // slices inserted so far
	used        bool // the append's own transaction wrote the rest and cleared the mark

	// AfterSlice, when set (tests), runs on the appending goroutine after each hidden slice
	// committed, with the number written so far.
	AfterSlice func(written int)
}

// JSONRecord returns the record of JSON messages, none of them with an idempotency key, to the
// stream at path.
func JSONRecord(path string, msgs []rawjson.Message) *Record {
	r := &Record{json: true, msgs: msgs}
	r.init(path)
	return r
}

// BytesRecord returns the byte record body to the stream at path.
func BytesRecord(path string, body []byte) *Record {
	r := &Record{body: body}
	r.init(path)
	return r
}

func (r *Record) init(path string) {
	r.hold.Path, r.hold.Owner = path, r
	r.hold.Finish = r.finish
	// The next write to a stream whose reservation was abandoned drops the hidden slices itself.
	r.hold.Release = func(t *kernel.Tx) error { return dropHidden(t, r.id) }
}

// Write writes r in slices, then runs final, the append itself, in the write that ends the
// reservation: final writes r's record through the kernel's insert path (Tx.WriteRecord or
// Tx.WriteBytes), which the hold hands to r. reserve runs in the reserving write: it finds the
// stream and judges it (open, of r's content type, the producer's next seq), and any error it
// returns makes Write report ok false, having written nothing: the caller then writes the record
// the usual way. gone is the error of a stream deleted while its slices are written.
func (r *Record) Write(ctx context.Context, k *kernel.Store, reserve func(t *kernel.Tx) (*kernel.StreamState, error),
	gone func() error, final func(t *kernel.Tx) error) (ok bool, err error) {
	if err := k.WriteHolding(ctx, &r.hold, func(t *kernel.Tx) error { return r.reserve(t, reserve, gone) }); err != nil {
		return false, nil
	}
	// From here on the stream is reserved: whatever happens, end the reservation.
	for {
		if r.AfterSlice != nil {
			r.AfterSlice(r.written)
		}
		if r.written >= len(r.slices)-1 {
			break
		}
		if err = k.WriteHolding(ctx, &r.hold, func(t *kernel.Tx) error { return r.writeSlice(t, gone) }); err != nil {
			break
		}
	}
	if err == nil {
		err = k.WriteHolding(ctx, &r.hold, func(t *kernel.Tx) error {
			e := final(t)
			if e == nil && !r.used {
				e = fmt.Errorf("stream store: a sliced append of %s was not written", r.hold.Path) // cannot happen
			}
			if e == nil {
				t.EndHold(&r.hold)
			}
			return e
		})
		if err == nil {
			return true, nil
		}
	}
	r.drop(ctx, k)
	return true, err
}

// Writing reports whether the write function holds a record it has not written yet to the
// stream with id: its messages were checked for keys before its first slice.
func Writing(t *kernel.Tx, id int64) bool {
	r := held(t)
	return r != nil && !r.used && r.id == id
}

// CreatedMs returns when the first slice was written of the record the write function wrote to
// the stream with id (false: it wrote none in slices): the time the record is stored with.
func CreatedMs(t *kernel.Tx, id int64) (int64, bool) {
	if r := held(t); r != nil && r.used && r.id == id {
		return r.createdMs, true
	}
	return 0, false
}

// held returns the record whose stream the write function holds, or nil.
func held(t *kernel.Tx) *Record {
	if h := t.Holding(); h != nil {
		r, _ := h.Owner.(*Record)
		return r
	}
	return nil
}

// reserve checks the stream, fixes the record's positions, sets the visibility mark and writes the
// first slice.
func (r *Record) reserve(t *kernel.Tx, find func(t *kernel.Tx) (*kernel.StreamState, error), gone func() error) error {
	m, err := find(t)
	if err != nil {
		return ErrNotSliced
	}
	dtx, err := t.Begin()
	if err != nil {
		return err
	}
	h, ok := dtx.(driver.HidingTx)
	if !ok {
		return ErrNotSliced
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
	if err := r.writeSlice(t, gone); err != nil {
		return err
	}
	t.StartHold(&r.hold)
	return nil
}

// writeSlice inserts the record's next slice (hidden). gone is the error of a stream deleted
// meanwhile (expiry collection).
func (r *Record) writeSlice(t *kernel.Tx, gone func() error) error {
	if m, ok := t.CachedStream(r.hold.Path); !ok || m.Row.ID != r.id {
		return gone()
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

// finish is Tx.WriteRecord and Tx.WriteBytes for the stream r holds (its Hold.Finish): it inserts
// the slices not yet written, clears the visibility mark and moves the marks. It reports false
// when m is not the reserved stream at the reserved position (the kernel then writes as usual).
func (r *Record) finish(t *kernel.Tx, m *kernel.StreamState, after, through int64) (bool, error) {
	if r.used || r.hold.Path != m.Row.Path || r.id != m.Row.ID {
		return false, nil
	}
	if r.recordStart != m.Tail || r.after != after || r.through != through {
		return true, fmt.Errorf("stream store: the reserved record of %s moved (%d, %d] → (%d, %d]", r.hold.Path, r.after, r.through, after, through)
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

// drop ends a reservation whose append failed: the hidden slices go, the mark is cleared, and the
// parked writes run. When even that fails, the reservation is abandoned and the next write to the
// stream drops the slices itself.
func (r *Record) drop(ctx context.Context, k *kernel.Store) {
	err := k.WriteHolding(context.WithoutCancel(ctx), &r.hold, func(t *kernel.Tx) error {
		if err := dropHidden(t, r.id); err != nil {
			return err
		}
		t.EndHold(&r.hold)
		return nil
	})
	if err != nil {
		r.hold.Abandoned.Store(true)
		k.Logger().Warn("stream store: a failed huge append left hidden slices; the next write to the stream drops them",
			"path", r.hold.Path, "err", err)
	}
}

// dropHidden drops the hidden slices of the stream with id.
func dropHidden(t *kernel.Tx, id int64) error {
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
// slices of at most kernel.RecordSliceBytes (a longer message is a slice of its own).
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

// byteSlices cuts a byte record starting at position start into slices of
// kernel.RecordSliceBytes.
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
