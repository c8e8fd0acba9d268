// Package pause is pausing a stream (docs/store.md#pausing-a-stream), a layer on the stream
// kernel (package kernel): it registers an admission check and a record effect with the kernel
// when a store opens (Use), and the kernel's insert path never names it.
package pause

import (
	"database/sql"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Pausing a stream (docs/store.md#pausing-a-stream). The pause state is the fold of the stream's
// control events (foldtype.TypeStreamPaused, foldtype.TypeStreamResumed), kept in the stream
// row (driver.Stream.Paused) and written in the transaction that lands the control event, so it is
// exactly as durable as the log that says it. The writer's cached row carries it: judging a batch
// costs no query, paused or not.
//
// The admission check refuses a batch that holds one fresh event other than a control event while
// the stream is paused, before any offset is taken; duplicates (idempotent replays) are echoed as
// usual, ephemerals flow, and so do the store's own wake records (the host must wake a paused
// stream to run its processors on what landed before the pause). A batch is judged by the state
// before it: a pause and a plain event in one batch on a running stream both land, a resume and a
// plain event on a paused one are refused together.

// Use registers pausing with the kernel k, while the store opens: the paused stream's admission
// check and the fold of landed control events into the stream row. The faces classify each
// message they admit (kernel.Pending's Ctl and Reason, Exempt for the store's wake records).
func Use(k *kernel.Store) {
	k.CheckAdmission(admitWhilePaused)
	k.OnRecorded(foldControl)
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

// foldControl folds the batch's fresh durable control events into the stream's pause state and
// writes the stream row when the state changed.
func foldControl(t *kernel.Tx, m *kernel.StreamState, batch []kernel.Pending, adm []kernel.Admitted) error {
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
