package stream

import (
	"bytes"
	"database/sql"
	"encoding/json"

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
// admit (record.go) refuses a batch that holds one fresh event other than a control event while
// the stream is paused, before any offset is taken; duplicates (idempotent replays) are echoed as
// usual, ephemerals flow, and so do the store's own wake records (the host must wake a paused
// stream to run its processors on what landed before the pause). A batch is judged by the state before it: a pause and a plain event in
// one batch on a running stream both land, a resume and a plain event on a paused one are refused
// together.

// controlMarker is in every message that names a control type without JSON escapes.
var controlMarker = []byte("events.iterate.com/stream/")

// controlOfMessage classifies a protocol message as a control event. A message neither holding
// the control prefix nor any escape cannot name a control type, so most messages cost one scan.
func controlOfMessage(msg []byte) (foldtype.ControlKind, string) {
	if len(msg) == 0 || msg[0] != '{' {
		return foldtype.ControlNone, ""
	}
	if !bytes.Contains(msg, controlMarker) && bytes.IndexByte(msg, '\\') < 0 {
		return foldtype.ControlNone, ""
	}
	var probe struct {
		Type      *string         `json:"type"`
		Payload   json.RawMessage `json:"payload"`
		Ephemeral bool            `json:"ephemeral"`
	}
	// Exact key names, as the event view reads them (rawjson.UnmarshalExact).
	if rawjson.UnmarshalExact(msg, &probe) != nil || probe.Type == nil {
		return foldtype.ControlNone, ""
	}
	return foldtype.ParseControl(*probe.Type, probe.Payload, false)
}

// foldControl folds the batch's fresh durable control events into the stream's pause state and
// writes the stream row when the state changed.
func (s *Store) foldControl(t *tx, m *streamMem, batch []pending, adm []admitted) error {
	paused, reason := m.Row.Paused.Valid, m.Row.Paused.String
	for i, p := range batch {
		if adm[i].dup || p.ephemeral {
			continue
		}
		switch p.ctl {
		case foldtype.ControlPause:
			paused, reason = true, p.reason
		case foldtype.ControlResume:
			paused, reason = false, ""
		}
	}
	next := sql.NullString{String: reason, Valid: paused}
	if next == m.Row.Paused {
		return nil
	}
	if err := t.db.UpdateStream(t.ctx, m.Row.ID, driver.StreamUpdate{Paused: &next}); err != nil {
		return err
	}
	m.Row.Paused = next
	return nil
}
