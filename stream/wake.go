package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Wake records (docs/store.md#wake-records), for streams used through the event view only.
//
// The first time a stream is woken by a store incarnation it gets a wake record: a fresh stream
// (never woken, nothing committed) gets its birth batch — itx/created {path} at offset 1 and
// itx/woken {incarnation: 1, reason} at offset 2, in one batch — and a stream woken by an earlier
// incarnation gets one itx/woken {incarnation, reason}. The incarnation counter is
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
	err := s.write(ctx, func(t *tx) (err error) {
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
func (s *Store) wakeIn(t *tx, path, reason string, create bool) ([]foldtype.Event, error) {
	if reason == "" {
		reason = WakeRequest
	}
	m, err := s.eventStreamFor(t, path, create)
	if errors.Is(err, foldtype.ErrStreamClosed) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	row := &m.Row
	if t.isWoken(row.ID) {
		return nil, nil
	}
	// Staged: a second wake later in the group sees it, and it holds only once committed.
	t.markWoken(row.ID)
	incarnation := row.Incarnation + 1
	var prepared []preparedInput
	if row.Incarnation == 0 && m.Tail == 0 {
		prepared, err = prepareInputs([]foldtype.EventInput{createdInput(path)})
		if err != nil {
			return nil, err
		}
	}
	woken, err := preparedWoken(incarnation, reason)
	if err != nil {
		return nil, err
	}
	out, err := s.appendEvents(t, m, append(prepared, woken), true)
	if err != nil {
		return nil, err
	}
	if err := t.db.UpdateStream(t.ctx, row.ID, driver.StreamUpdate{Incarnation: &incarnation}); err != nil {
		return nil, fmt.Errorf("wake %s: %w", quotePath(path), err)
	}
	row.Incarnation = incarnation
	return out, nil
}

// createdInput is a fresh stream's birth record.
func createdInput(path string) foldtype.EventInput {
	return foldtype.EventInput{Type: CreatedType, Source: &foldtype.Source{Platform: true},
		Payload: foldtype.JSON(map[string]any{"path": path})}
}

// wokenInput is a stream's wake record.
func wokenInput(incarnation int64, reason string) foldtype.EventInput {
	return foldtype.EventInput{Type: WokenType, Source: &foldtype.Source{Platform: true},
		Payload: foldtype.JSON(map[string]any{"incarnation": incarnation, "reason": reason})}
}

// wokenBefore and wokenAfter are the stored body prefix of a wake record before and after its
// payload; wokenReasons end the payloads of the store's own reasons.
var (
	wokenBefore, wokenAfter = func() ([]byte, []byte) {
		const mark = `"payload-of-the-wake-record"`
		in := foldtype.EventInput{Type: WokenType, Source: &foldtype.Source{Platform: true}, Payload: json.RawMessage(mark)}
		_, b, err := foldtype.PrepareEventInput(0, in)
		if err != nil {
			panic(err)
		}
		b = b[:len(b)-1] // a prefix, as prepareInputs cuts it
		i := bytes.Index(b, []byte(mark))
		if i < 0 || bytes.Contains(b[i+len(mark):], []byte(mark)) {
			panic("stream: the wake record's payload is not found once in its body")
		}
		return b[:i:i], b[i+len(mark):]
	}()
	wokenReasons = map[string]string{
		WakeRequest: `,"reason":"` + WakeRequest + `"}`,
		WakeAlarm:   `,"reason":"` + WakeAlarm + `"}`,
	}
)

// preparedWoken is prepareInputs of wokenInput(incarnation, reason), built without encoding the
// record through reflection for the store's own reasons (an engine opening over many streams
// appends one per stream it starts work on): the same input, the same body bytes
// (TestAWakeRecordIsPreparedAsItsInputWouldBe).
func preparedWoken(incarnation int64, reason string) (preparedInput, error) {
	tail, ok := wokenReasons[reason]
	if !ok {
		p, err := prepareInputs([]foldtype.EventInput{wokenInput(incarnation, reason)})
		if err != nil {
			return preparedInput{}, err
		}
		return p[0], nil
	}
	payload := make([]byte, 0, len(`{"incarnation":`)+20+len(tail))
	payload = append(payload, `{"incarnation":`...)
	payload = strconv.AppendInt(payload, incarnation, 10)
	payload = append(payload, tail...)
	prefix := make([]byte, 0, len(wokenBefore)+len(payload)+len(wokenAfter))
	prefix = append(append(append(prefix, wokenBefore...), payload...), wokenAfter...)
	return preparedInput{in: foldtype.EventInput{Type: WokenType, Source: &foldtype.Source{Platform: true}, Payload: payload}, prefix: prefix}, nil
}
