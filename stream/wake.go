package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Wake records (docs/store.md#wake-records), for streams used through the event view only.
//
// The first time a stream is woken by a store incarnation it gets a wake record: a stream the wake
// creates gets its birth batch — itx/created {path} at offset 1 and itx/woken {incarnation: 1,
// reason} at offset 2, in one batch — and a stream that existed (woken by an earlier incarnation,
// or created by its writer, over HTTP say) gets one itx/woken {incarnation, reason}. The incarnation counter is
// streams.incarnation, bumped in the same transaction. Append never adds a wake record, and streams
// that only the HTTP protocol uses are never woken, so their contents stay exactly what their
// writers wrote.

const (
	// CreatedType is the birth record's type (foldtype.CreatedType).
	CreatedType = foldtype.CreatedType
	// WokenType is the wake record's type (foldtype.WokenType).
	WokenType = foldtype.WokenType
)

// Wake reasons.
const (
	// WakeRequest: the stream was opened to serve a request or register a processor.
	WakeRequest = "request"
	// WakeAlarm: the stream was opened by the alarm loop to revive a processor.
	WakeAlarm = "alarm"
)

// Wake appends the stream's wake record for this store incarnation, creating the stream when it
// does not exist, and returns the records it appended (none when the stream was already woken by
// this incarnation, or is closed: a closed stream takes no wake record). reason is WakeRequest or
// WakeAlarm (any non-empty string is stored as given).
func (e *Events) Wake(ctx context.Context, path, reason string) ([]foldtype.Event, error) {
	s := e.s
	return s.wake1(ctx, path, reason, true)
}

// WakeExisting is Wake for a stream that must exist: it never creates one. A missing path fails
// with STREAM_NOT_FOUND and a deleted one with STREAM_GONE, writing nothing; a closed stream takes
// no wake record (no error).
func (e *Events) WakeExisting(ctx context.Context, path, reason string) ([]foldtype.Event, error) {
	s := e.s
	return s.wake1(ctx, path, reason, false)
}

func (s *Store) wake1(ctx context.Context, path, reason string, create bool) ([]foldtype.Event, error) {
	var out []foldtype.Event
	err := s.k.Write(ctx, func(t *kernel.Tx) (err error) {
		out, err = s.wakeIn(t, path, reason, create)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// wakeIn appends the stream's wake record inside the write t (see Wake; create as in wake1) and
// returns the records appended.
func (s *Store) wakeIn(t *kernel.Tx, path, reason string, create bool) ([]foldtype.Event, error) {
	if reason == "" {
		reason = WakeRequest
	}
	// The birth record says the platform created the stream: only a wake that creates it writes
	// one. A stream that exists empty was created by its writer (a PUT over HTTP, a protocol
	// create), and its first wake writes itx/woken alone (docs/store.md#records-nobody-appended).
	creates := false
	if create {
		_, err := t.Stream(path)
		creates = errors.Is(err, driver.ErrNoStream)
	}
	m, err := s.eventStreamFor(t, path, create)
	if errors.Is(err, foldtype.ErrStreamClosed) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	row := &m.Row
	if t.Marked(row.ID) {
		return nil, nil
	}
	// Staged: a second wake later in the group sees it, and it holds only once committed.
	t.Mark(row.ID)
	incarnation := row.Incarnation + 1
	platform := &foldtype.Source{Platform: true}
	var inputs []foldtype.EventInput
	if creates {
		inputs = append(inputs, foldtype.EventInput{Type: CreatedType, Source: platform,
			Payload: foldtype.JSON(map[string]any{"path": path})})
	}
	inputs = append(inputs, foldtype.EventInput{Type: WokenType, Source: platform,
		Payload: foldtype.JSON(map[string]any{"incarnation": incarnation, "reason": reason})})
	prepared, err := prepareInputs(inputs)
	if err != nil {
		return nil, err
	}
	out, err := s.appendEvents(t, m, prepared, true)
	if err != nil {
		return nil, err
	}
	if err := t.Driver().UpdateStream(t.Context(), row.ID, driver.StreamUpdate{Incarnation: &incarnation}); err != nil {
		return nil, fmt.Errorf("wake %s: %w", quotePath(path), err)
	}
	row.Incarnation = incarnation
	return out, nil
}
