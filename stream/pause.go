package stream

import (
	"bytes"
	"database/sql"
	"github.com/foldstream/foldstream/stream/internal/kernel"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
)

// Pausing a stream (docs/store.md#pausing-a-stream). The pause state is the fold of the stream's
// control events (foldtype.TypeStreamPaused, foldtype.TypeStreamResumed), kept in the stream
// row (driver.Stream.Paused) and written in the transaction that lands the control event, so it is
// exactly as durable as the log that says it. The writer's cached row carries it: judging a batch
// costs no query, paused or not.
//
// Pausing is a layer on the kernel: it registers an admission check and a record effect
// (hooks.go, usePause) and the kernel's insert path never names it. The admission check refuses a
// batch that holds one fresh event other than a control event while the stream is paused, before
// any offset is taken; duplicates (idempotent replays) are echoed as usual, ephemerals flow, and so
// do the store's own wake records (the host must wake a paused stream to run its processors on
// what landed before the pause). A batch is judged by the state before it: a pause and a plain
// event in one batch on a running stream both land, a resume and a plain event on a paused one are
// refused together.

// usePause registers pausing with the kernel: the paused stream's admission check and the fold of
// landed control events into the stream row.
func (s *Store) usePause() {
	s.k.CheckAdmission(admitWhilePaused)
	s.k.OnRecorded(s.foldControl)
}

// admitWhilePaused judges a batch of a paused stream: only control events, ephemerals and the
// store's own wake records are admitted; one other fresh event refuses the whole batch. A running
// stream's batch is not judged.
func admitWhilePaused(row *driver.Stream) func(p *kernel.Pending) error {
	if !row.Paused.Valid {
		return nil
	}
	reason := row.Paused.String
	return func(p *kernel.Pending) error {
		if p.Ctl == foldtype.ControlNone && !p.Ephemeral && !p.Exempt {
			return foldtype.StreamPausedError(reason)
		}
		return nil
	}
}

// controlMarker is in every message that names a control type without JSON escapes.
var controlMarker = []byte("events.iterate.com/stream/")

// controlOfMessage classifies a protocol message as a control event, from its members as the
// body's one scan found them. A type without escapes that does not start with the control prefix
// cannot name a control type, so most messages cost a prefix comparison.
func controlOfMessage(msg *rawjson.Message) (foldtype.ControlKind, string) {
	if msg.Raw[0] != '{' {
		return foldtype.ControlNone, ""
	}
	t := msg.Member(mType)
	if t.Kinds == 0 || (bytes.IndexByte(t.Value, '\\') < 0 && !bytes.HasPrefix(t.Value[1:], controlMarker)) {
		return foldtype.ControlNone, ""
	}
	// As a decoding into typed fields would, a wrong kind of "type" or "ephemeral" anywhere in the
	// message makes it no control event.
	if !stringOrNull(t.Kinds) || msg.Member(mEphemeral).Kinds&^(rawjson.KindBool|rawjson.KindNull) != 0 {
		return foldtype.ControlNone, ""
	}
	typ, ok := t.String()
	if !ok {
		return foldtype.ControlNone, ""
	}
	return foldtype.ParseControl(typ, msg.Member(mPayload).Value, false)
}

// foldControl folds the batch's fresh durable control events into the stream's pause state and
// writes the stream row when the state changed.
func (s *Store) foldControl(t *kernel.Tx, m *kernel.StreamState, batch []kernel.Pending, adm []kernel.Admitted) error {
	paused, reason := m.Row.Paused.Valid, m.Row.Paused.String
	for i, p := range batch {
		if adm[i].Dup || p.Ephemeral {
			continue
		}
		switch p.Ctl {
		case foldtype.ControlPause:
			paused, reason = true, p.Reason
		case foldtype.ControlResume:
			paused, reason = false, ""
		}
	}
	next := sql.NullString{String: reason, Valid: paused}
	if next == m.Row.Paused {
		return nil
	}
	if err := t.Driver().UpdateStream(t.Context(), m.Row.ID, driver.StreamUpdate{Paused: &next}); err != nil {
		return err
	}
	m.Row.Paused = next
	return nil
}
