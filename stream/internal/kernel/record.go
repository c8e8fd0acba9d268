package kernel

import (
	"bytes"
	"context"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
)

// The one insert path. Both views append through Tx.Admit and Tx.WriteRecord: the event view's
// batches (Append, Wake, event-shaped protocol messages) and the protocol view's records (POSTs,
// producer batches, a create's initial body). The rules are in docs/store.md#appending:
//
//   - an idempotency key (event-shaped messages only, never on ephemerals) that names a stored
//     event with the same type, payload and metadata is a duplicate: it takes no offset; with a
//     different body it refuses the whole batch (IDEMPOTENCY_CONFLICT). A key repeated inside the
//     batch is one message;
//   - an offset precondition must name exactly the offset the message gets (OFFSET_CONFLICT);
//   - fresh messages take consecutive offsets after the highest offset handed out (ephemerals
//     share the sequence); the durable ones are stored as one record whose End is the batch's
//     last offset, sliced into rows of at most recordSliceBytes so a huge record never has to be
//     read whole.

// recordSliceBytes is the body size at which a record is cut into another row.
const RecordSliceBytes = 256 << 10

// Pending is one message of a batch on its way in.
type Pending struct {
	Body      []byte               // the stored JSON (an ephemeral's is never stored)
	Key       string               // idempotency key, "" for none
	Probe     *foldtype.EventInput // type, payload and metadata, compared when key names a stored event (set with key)
	Ephemeral bool                 // takes an offset, never stored: for live subscribers only
	Expect    int64                // offset precondition, 0 for none
	// Ctl is the message's control kind (foldtype.ControlKind), as the face that built the batch
	// classified it, and Reason a pause's reason: what they mean is for the layers that judge
	// them (pausing).
	Ctl    foldtype.ControlKind
	Reason string // a pause's reason (see Ctl)
	// Exempt marks the store's own wake records, which a feature's admission check lets pass
	// (a paused stream must still be woken).
	Exempt bool
	// Scanned is a protocol message as the body's one scan found it (nil for event inputs).
	Scanned *rawjson.Message
}

// Admitted is the outcome of Tx.Admit for one message.
type Admitted struct {
	Offset int64 // the message's offset (fresh or, for a duplicate, the stored one)
	Dup    bool  // a duplicate of a stored event (or of an earlier message of the batch)
	DupOf  int   // for an in-batch duplicate: the index of the first message, else -1
	// existing is the stored event a duplicate repeats (nil for a fresh message, and for an
	// in-batch duplicate of a fresh one): a pointer keeps a batch's outcomes small.
	Existing *foldtype.Event
}

// Admit runs the idempotency check and the features' admission checks (hooks.go) and assigns
// offsets. It changes nothing: the caller writes the fresh messages with WriteRecord.
func (t *Tx) Admit(m *StreamState, batch []Pending) (out []Admitted, after, through int64, err error) {
	after = m.HighestAssigned
	through = after
	out = make([]Admitted, len(batch))
	judges := t.s.judgesOf(&m.Row)
	var byKey map[string]int
	for i, p := range batch {
		out[i].DupOf = -1
		if p.Key != "" && !p.Ephemeral {
			if j, ok := byKey[p.Key]; ok {
				var prev foldtype.Event
				if out[j].Existing != nil {
					prev = *out[j].Existing
				}
				if !out[j].Dup {
					prev = foldtype.Event{Type: batch[j].Probe.Type, Payload: batch[j].Probe.Payload, Metadata: batch[j].Probe.Metadata}
				}
				if !foldtype.SameIdempotentEvent(prev, *p.Probe) {
					return nil, 0, 0, foldtype.IdempotencyConflictError(p.Key, out[j].Offset)
				}
				out[i] = Admitted{Offset: out[j].Offset, Dup: true, DupOf: j, Existing: out[j].Existing}
				continue
			}
			existing, found, err := lookupIdempotencyKey(t.ctx, t.db, &m.Row, p.Key, t.s.opts.DecodeEvent)
			if err != nil {
				return nil, 0, 0, err
			}
			if byKey == nil {
				byKey = make(map[string]int)
			}
			byKey[p.Key] = i
			if found {
				if !foldtype.SameIdempotentEvent(existing, *p.Probe) {
					return nil, 0, 0, foldtype.IdempotencyConflictError(p.Key, existing.Offset)
				}
				out[i] = Admitted{Offset: existing.Offset, Dup: true, DupOf: -1, Existing: &existing}
				continue
			}
		}
		for _, judge := range judges {
			// A feature's admission check (hooks.go): one refused message refuses the whole
			// batch, before any offset is taken.
			if err := judge(&batch[i]); err != nil {
				return nil, 0, 0, err
			}
		}
		off := through + 1
		if p.Expect != 0 && p.Expect != off {
			return nil, 0, 0, foldtype.OffsetConflictError(p.Expect, off)
		}
		through = off
		out[i].Offset = off
	}
	return out, after, through, nil
}

// WriteRecord stores the fresh durable messages of an admitted batch as one record (sliced when
// long), moves the writer's marks, registers the keys and runs the features' record effects
// (hooks.go). through is the batch's last offset:
// when the batch carried a durable message, the durable mark moves to it.
//
// joined, when not nil, is text the batch's bodies may be cut from (a request's top-level array
// without its brackets): when every message of the batch is fresh and durable and their bodies are
// exactly joined's elements in order, the record's body is joined itself, not a copy. The record
// kept for the tail cache is then a copy, as the caller's memory is not the store's to keep.
func (t *Tx) WriteRecord(m *StreamState, batch []Pending, adm []Admitted, after, through int64, joined []byte) error {
	if done, err := t.finishHeld(m, after, through); done {
		return err // the record of the write holding the stream, written by its owner (hold.go)
	}
	shared := joined != nil && len(joined) <= RecordSliceBytes && joinsBatch(joined, batch, adm)
	recordStart := m.Tail
	var rec *driver.Record
	prev := after
	durable := false
	flush := func(end int64) error {
		if rec == nil {
			return nil
		}
		// A client that went away stops a long record between slices: the write fails and its
		// savepoint takes back the slices already written.
		if err := t.ctx.Err(); err != nil {
			return err
		}
		rec.End = end
		err := t.db.InsertRecord(t.ctx, *rec)
		if err == nil {
			if shared && t.wantRecords() {
				rec.Body = bytes.Clone(rec.Body)
			}
			t.addRecord(*rec)
		}
		rec = nil
		return err
	}
	for i, p := range batch {
		if adm[i].Dup || p.Ephemeral {
			continue
		}
		off := adm[i].Offset
		if !shared && rec != nil && len(rec.Body)+1+len(p.Body) > RecordSliceBytes {
			if err := flush(prev); err != nil {
				return err
			}
		}
		if rec == nil {
			// A slice starts where the previous one ended (the first at the batch's start).
			rec = &driver.Record{StreamID: m.Row.ID, RecordStart: recordStart, Start: prev, CreatedMs: t.now.UnixMilli()}
			// About three bytes of frame per message (a one-byte offset step, a two-byte length).
			rec.Frames = make([]byte, 0, min(3*len(batch), 4096))
			if shared {
				rec.Body = joined
			} else {
				rec.Body = make([]byte, 0, min(len(p.Body)*len(batch), RecordSliceBytes))
			}
		} else if !shared {
			rec.Body = append(rec.Body, ',')
		}
		rec.Frames = driver.AppendFrame(rec.Frames, off-prev, len(p.Body))
		if !shared {
			rec.Body = append(rec.Body, p.Body...)
		}
		if p.Key != "" {
			rec.Keys = append(rec.Keys, driver.Key{Key: p.Key, Offset: off})
		}
		prev = off
		durable = true
	}
	if durable {
		if err := flush(through); err != nil {
			return err
		}
		m.Tail = through
		t.PersistAccess(m)
		for _, effect := range t.s.hooks.recorded {
			if err := effect(t, m, batch, adm); err != nil {
				return err
			}
		}
	}
	if !t.s.exclusive && through > m.Tail {
		// Ephemerals past the durable tail: record the offsets handed out, so no node hands
		// them out again (docs/postgres.md#ephemeral-events).
		if err := t.db.UpdateStream(t.ctx, m.Row.ID, driver.StreamUpdate{Highest: &through}); err != nil {
			return err
		}
	}
	m.HighestAssigned = through
	t.Changed(m.Row.ID, m.Row.Path)
	return nil
}

// joinsBatch reports whether the batch's messages are all fresh and durable and their bodies are
// the elements of joined, in order, each a slice of joined itself with one separator between them:
// then joined is byte for byte the record WriteRecord would build.
func joinsBatch(joined []byte, batch []Pending, adm []Admitted) bool {
	pos := 0
	for i, p := range batch {
		if adm[i].Dup || p.Ephemeral || len(p.Body) == 0 || pos+len(p.Body) > len(joined) ||
			&p.Body[0] != &joined[pos] {
			return false
		}
		pos += len(p.Body) + 1 // the separator: the next element starts one byte on, after a comma
	}
	return pos == len(joined)+1
}

// WriteBytes stores a byte record at the stream's tail (sliced when long).
func (t *Tx) WriteBytes(m *StreamState, body []byte) error {
	if done, err := t.finishHeld(m, m.Tail, m.Tail+int64(len(body))); done {
		return err
	}
	start := m.Tail
	pos := start
	for len(body) > 0 {
		if err := t.ctx.Err(); err != nil {
			return err // the client went away: stop, and let the savepoint take the slices back
		}
		n := min(len(body), RecordSliceBytes)
		rec := driver.Record{StreamID: m.Row.ID, RecordStart: start, Start: pos,
			End: pos + int64(n), CreatedMs: t.now.UnixMilli(), Body: body[:n]}
		if err := t.db.InsertRecord(t.ctx, rec); err != nil {
			return err
		}
		if n <= tailCacheBytes && t.wantRecords() {
			rec.Body = bytes.Clone(rec.Body) // the caller's memory: keep a copy
			t.addRecord(rec)
		}
		pos += int64(n)
		body = body[n:]
	}
	m.Tail = pos
	m.HighestAssigned = max(m.HighestAssigned, pos)
	t.PersistAccess(m)
	t.Changed(m.Row.ID, m.Row.Path)
	return nil
}

// PersistAccess writes the last access of a stream with a sliding TTL in the append's own
// transaction (a stream without one needs no stream-row write per append).
func (t *Tx) PersistAccess(m *StreamState) {
	if !m.Row.TTLSeconds.Valid {
		return
	}
	ms := t.now.UnixMilli()
	if ms <= m.Row.LastAccessMs {
		return
	}
	if err := t.db.UpdateStream(t.ctx, m.Row.ID, driver.StreamUpdate{LastAccessMs: &ms}); err == nil {
		m.Row.LastAccessMs = ms
	}
}

// lookupIdempotencyKey finds the durable event registered under key in the stream (fork
// ancestors included, up to the fork offsets).
func lookupIdempotencyKey(ctx context.Context, q driver.Reader, row *streamRow, key string, decode func(string, Message) (foldtype.Event, error)) (foldtype.Event, bool, error) {
	segs, err := segmentsOf(ctx, q, row)
	if err != nil {
		return foldtype.Event{}, false, err
	}
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		off, found, err := q.KeyOffset(ctx, seg.ID, key)
		if err != nil {
			return foldtype.Event{}, false, err
		}
		if !found || (seg.Through >= 0 && off > seg.Through) {
			continue
		}
		ev, ok, err := messageAt(ctx, q, seg.ID, row.Path, off, decode)
		if err != nil {
			return foldtype.Event{}, false, err
		}
		if ok {
			return ev, true, nil
		}
	}
	return foldtype.Event{}, false, nil
}

// messageAt decodes the stored JSON message at offset off of stream id.
func messageAt(ctx context.Context, q driver.Reader, id int64, path string, off int64, decode func(string, Message) (foldtype.Event, error)) (foldtype.Event, bool, error) {
	var ev foldtype.Event
	found := false
	var decErr error
	err := q.Records(ctx, id, off-1, func(rec driver.Record) (bool, error) {
		err := driver.EachFrame(rec, func(o int64, body []byte) bool {
			if o == off {
				ev, decErr = decode(path, Message{Offset: o, CreatedMs: rec.CreatedMs, Body: body})
				found = true
				return false
			}
			return o < off
		})
		return false, err
	})
	if err != nil {
		return foldtype.Event{}, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	if decErr != nil {
		return foldtype.Event{}, false, decErr
	}
	return ev, found, nil
}
