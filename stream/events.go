package stream

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/foldstream/foldstream"
)

// The event view: appends and reads of events (spec §13.2–13.5) over the store's entries.
//
// Offsets of one stream come from one sequence shared by durable and ephemeral events. The writer
// owns it (streamMem.HighestAssigned, streamMem.Tail); streams.tail is the durable mark — the
// through of the last committed batch that carried a durable event — written in the same
// transaction as the batch's rows, so it is exactly as durable as they are. Ephemeral offsets above
// the mark live only in memory: a new incarnation of the store hands the same numbers out again
// (S-10).

// EventContentType is the content type of streams the event view creates.
const EventContentType = "application/json"

// eventView is the store's in-memory state for the event view.
type eventView struct {
	// rows caches the stream rows of event appends by path; writer-owned. An entry is trusted only
	// while the writer still holds the stream's streamMem (a deleted stream's mem is forgotten), and
	// only for fields fixed at creation (id, path, content type, fork origin). Whether the stream is
	// still open is re-checked by the durable append's own UPDATE of the durable mark.
	rows map[string]*streamRow
	// woken holds the streams that got their wake record in this incarnation; writer-owned.
	woken map[int64]bool

	ringMu sync.Mutex
	rings  map[int64]*ephemeralRing

	subsMu  sync.RWMutex
	subs    map[string][]*Subscription
	closing bool // set under subsMu by closeEventView; no subscription starts after it

	alarms  alarmState
	waiters waiterSet

	// readBudget is a read page's byte budget: ReadBudgetBytes (tests lower it).
	readBudget int
}

func newEventView() *eventView {
	return &eventView{
		readBudget: ReadBudgetBytes,
		rows:       make(map[string]*streamRow),
		woken:      make(map[int64]bool),
		rings:      make(map[int64]*ephemeralRing),
		subs:       make(map[string][]*Subscription),
	}
}

// closeEventView stops the event view's background work before the store waits for it: no new
// subscription starts, and the alarm loop stops and waits for its handlers.
func (s *Store) closeEventView() {
	s.ev.subsMu.Lock()
	s.ev.closing = true
	s.ev.subsMu.Unlock()
	s.StopAlarms()
}

// Append commits events to the stream at path, creating the stream (content type
// application/json) when it does not exist, and returns the committed events in input order (spec
// §13.2):
//
//   - an empty call is a no-op;
//   - every type must be non-empty after trimming ([foldstream.CodeInvalidEvent]);
//   - an idempotency key that names an existing event with the same body echoes it without a new
//     offset; a different body refuses the whole batch with [foldstream.CodeIdempotencyConflict];
//     a key repeated inside the batch yields one row (spec §13.4);
//   - an input's Offset is a precondition; a mismatch refuses the whole batch with
//     [foldstream.CodeOffsetConflict] (spec §13.5);
//   - ephemeral events take an offset but write nothing; an ephemeral-only batch on a stream the
//     writer already knows runs no SQL (a protocol close or delete makes the writer forget the
//     stream, so such a batch is still refused);
//   - a body over [MaxEventBytes] refuses the batch with [foldstream.CodeEventTooLarge].
//
// The batch commits atomically with whatever else the writer grouped with it; it returns after the
// commit, by which time every subscriber's push for it is queued.
func (s *Store) Append(ctx context.Context, path string, inputs ...foldstream.EventInput) ([]foldstream.Event, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	prepared, err := prepareInputs(inputs)
	if err != nil {
		return nil, err
	}
	var out []foldstream.Event
	err = s.write(ctx, func(tx *Tx) error {
		var err error
		out, err = s.appendPrepared(tx, path, prepared)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// appendEventsTx appends event inputs to the stream row inside the caller's write, with the event
// view's semantics (idempotency, offset preconditions, ephemerals, subscriber fan-out after the
// commit). The protocol side uses it to append event-shaped JSON messages. row must be a live
// stream holding JSON.
func appendEventsTx(tx *Tx, row *streamRow, inputs []foldstream.EventInput) ([]foldstream.Event, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	prepared, err := prepareInputs(inputs)
	if err != nil {
		return nil, err
	}
	tx.s.cacheRowAfterCommit(tx, row)
	return tx.s.appendToRow(tx, row, row.ID, row.Path, prepared)
}

// appendPrepared resolves path (creating the stream when needed) and appends.
func (s *Store) appendPrepared(tx *Tx, path string, prepared []preparedInput) ([]foldstream.Event, error) {
	// A stream the writer already knows needs no lookup: an ephemeral-only batch then runs no SQL
	// at all (S-09), and a durable one only its inserts and the update of the durable mark.
	if row, ok := s.knownStream(tx, path); ok {
		out, err := s.appendToRow(tx, row, row.ID, path, prepared)
		if !errors.Is(err, errStaleRow) {
			return out, err
		}
		delete(s.ev.rows, path) // closed or deleted meanwhile: load it afresh for the real answer
	}
	row, err := s.eventStreamRow(tx, path)
	if err != nil {
		return nil, err
	}
	return s.appendToRow(tx, row, row.ID, path, prepared)
}

// knownStream returns the cached row of path when the writer holds its in-memory state.
func (s *Store) knownStream(tx *Tx, path string) (*streamRow, bool) {
	row, ok := s.ev.rows[path]
	if !ok {
		return nil, false
	}
	if m, ok := tx.staged[row.ID]; ok {
		return row, m != nil
	}
	if m, ok := tx.g.staged[row.ID]; ok {
		return row, m != nil
	}
	_, ok = s.mem[row.ID]
	return row, ok
}

// errStaleRow: a cached stream row no longer accepts event appends (closed, deleted).
var errStaleRow = errors.New("stream store: stale cached stream row")

// eventStreamRow loads the stream at path for an event append, creating it when missing.
func (s *Store) eventStreamRow(tx *Tx, path string) (*streamRow, error) {
	row, err := loadStreamByPath(tx, path)
	if errors.Is(err, errNoStream) {
		if err := ValidateStreamName(path); err != nil {
			return nil, err
		}
		ms := tx.Now().UnixMilli()
		res, err := tx.Exec(`INSERT INTO streams(path, content_type, created_ms, last_access_ms) VALUES (?, ?, ?, ?)`,
			path, EventContentType, ms, ms)
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", quotePath(path), err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", quotePath(path), err)
		}
		row = &streamRow{ID: id, Path: path, ContentType: EventContentType, CreatedMs: ms, LastAccessMs: ms}
		s.streamCreated(tx, path)
	} else if err != nil {
		return nil, err
	}
	if err := checkEventStream(row); err != nil {
		return nil, err
	}
	s.cacheRowAfterCommit(tx, row)
	return row, nil
}

// cacheRowAfterCommit remembers row in the writer's row cache once the write commits. Never
// before: a refused write rolls its new stream row back, and SQLite hands the same rowid to the
// next stream created, so a row cached early could route later appends of this path into that
// other stream.
func (s *Store) cacheRowAfterCommit(tx *Tx, row *streamRow) {
	c := *row
	tx.AfterCommit(func() { s.ev.rows[c.Path] = &c })
}

// forgetCachedRow drops path from the writer's row cache, at once and again after the commit (an
// earlier write of the group may re-cache it in its own AfterCommit hook). Every write that makes a
// stream refuse event appends (close, soft delete) calls it: an ephemeral-only batch on a cached
// stream runs no SQL, so the cache is the only place it could learn of the change.
func (s *Store) forgetCachedRow(tx *Tx, path string) {
	delete(s.ev.rows, path)
	tx.AfterCommit(func() { delete(s.ev.rows, path) })
}

// checkEventStream refuses event appends to streams that cannot hold them.
func checkEventStream(row *streamRow) error {
	if row.State != 0 {
		return foldstream.NewError(foldstream.CodeStreamGone, map[string]any{"path": row.Path},
			"append: stream %s was deleted", quotePath(row.Path))
	}
	if row.Closed {
		return streamClosedError(row.Path, row.Tail)
	}
	if !isJSONContentType(row.ContentType) {
		return foldstream.NewError(foldstream.CodeInvalidEvent, map[string]any{"path": row.Path, "contentType": row.ContentType},
			"append: stream %s holds %s, not JSON events", quotePath(row.Path), row.ContentType)
	}
	return nil
}

func isJSONContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// appendToRow is the append pipeline of spec §13.2 steps 3–7.
func (s *Store) appendToRow(tx *Tx, row *streamRow, id int64, path string, prepared []preparedInput) ([]foldstream.Event, error) {
	m, err := tx.Mem(id, func() (streamMem, error) {
		return streamMem{HighestAssigned: row.Tail, Tail: row.Tail}, nil
	})
	if err != nil {
		return nil, err
	}
	after := m.HighestAssigned
	through := after
	createdAt := formatCreatedAt(tx.Now())
	results := make([]foldstream.Event, len(prepared))
	bodies := make([][]byte, len(prepared))
	fresh := make([]int, 0, len(prepared))
	var byKey map[string]int
	durables := 0
	for i, p := range prepared {
		in := p.in
		if in.IdempotencyKey != "" && !in.Ephemeral {
			if j, ok := byKey[in.IdempotencyKey]; ok {
				if !foldstream.SameIdempotentEvent(results[j], in) {
					return nil, foldstream.IdempotencyConflictError(in.IdempotencyKey, results[j].Offset)
				}
				results[i] = results[j]
				continue
			}
			existing, found, err := lookupIdempotencyKey(tx, row, in.IdempotencyKey)
			if err != nil {
				return nil, err
			}
			if found {
				if !foldstream.SameIdempotentEvent(existing, in) {
					return nil, foldstream.IdempotencyConflictError(in.IdempotencyKey, existing.Offset)
				}
				results[i] = existing
				if byKey == nil {
					byKey = make(map[string]int)
				}
				byKey[in.IdempotencyKey] = i
				continue
			}
		}
		off := through + 1
		if in.Offset != 0 && in.Offset != off {
			return nil, foldstream.OffsetConflictError(in.Offset, off)
		}
		through = off
		results[i] = foldstream.Event{Type: in.Type, Payload: in.Payload, Metadata: in.Metadata, Source: in.Source,
			IdempotencyKey: in.IdempotencyKey, Ephemeral: in.Ephemeral, Offset: off, CreatedAt: createdAt, Path: path}
		bodies[i] = finishBody(p.prefix, createdAt)
		fresh = append(fresh, i)
		if !in.Ephemeral {
			durables++
			if in.IdempotencyKey != "" {
				if byKey == nil {
					byKey = make(map[string]int)
				}
				byKey[in.IdempotencyKey] = i
			}
		}
	}
	if len(fresh) == 0 {
		return results, nil // every event deduped: no commit, no fan-out (step 4)
	}
	if durables > 0 {
		// The durable mark moves in the same transaction as the rows. The update also proves the
		// stream still takes appends (a cached row may be stale), so it runs first.
		res, err := tx.Exec(`UPDATE streams SET tail = ?, last_access_ms = ? WHERE id = ? AND state = 0 AND closed = 0`,
			through, tx.Now().UnixMilli(), id)
		if err != nil {
			return nil, fmt.Errorf("append to %s: %w", quotePath(path), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return nil, errStaleRow
		}
		if err := insertEventRows(tx, id, after, tx.Now().UnixMilli(), prepared, results, bodies, fresh); err != nil {
			return nil, err
		}
		m.Tail = through
	}
	m.HighestAssigned = through

	committed := make([]foldstream.Event, len(fresh))
	var ephemerals []foldstream.Event
	for k, i := range fresh {
		committed[k] = results[i]
		if results[i].Ephemeral {
			ephemerals = append(ephemerals, results[i])
		}
	}
	tx.AfterCommit(func() {
		// Only once the batch landed: a refused batch leaves no phantom in the ring (S-05).
		if len(ephemerals) > 0 {
			s.rememberEphemerals(id, ephemerals)
		}
		s.publish(path, committed, after, through) // waiters, then subscribers
	})
	return results, nil
}

// insertEventRows writes the batch's durable rows, many rows per statement.
func insertEventRows(tx *Tx, id, after, createdMs int64, prepared []preparedInput, results []foldstream.Event, bodies [][]byte, fresh []int) error {
	const perStmt = 64
	var sb strings.Builder
	args := make([]any, 0, perStmt*5)
	flush := func(n int) error {
		if n == 0 {
			return nil
		}
		sb.Reset()
		sb.WriteString(`INSERT INTO entries(stream_id, offset, record_start, created_ms, idempotency_key, body) VALUES `)
		for k := range n {
			if k > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`(?,?,?,?,?,?)`)
		}
		_, err := tx.Exec(sb.String(), args...)
		args = args[:0]
		if err != nil {
			return fmt.Errorf("append: insert events: %w", err)
		}
		return nil
	}
	n := 0
	for _, i := range fresh {
		if results[i].Ephemeral {
			continue
		}
		var key any
		if k := prepared[i].in.IdempotencyKey; k != "" {
			key = k
		}
		args = append(args, id, results[i].Offset, after, createdMs, key, bodies[i])
		n++
		if n == perStmt {
			if err := flush(n); err != nil {
				return err
			}
			n = 0
		}
	}
	return flush(n)
}

// lookupIdempotencyKey finds the durable event already registered under key in the stream
// (fork ancestors included, up to the fork offsets).
func lookupIdempotencyKey(tx *Tx, row *streamRow, key string) (foldstream.Event, bool, error) {
	segs := []segment{{ID: row.ID, Through: -1}}
	if row.ForkedFrom.Valid {
		var err error
		if segs, err = segmentsOf(tx, row); err != nil {
			return foldstream.Event{}, false, err
		}
	}
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		upper := seg.Through
		if upper < 0 {
			upper = 1<<63 - 1
		}
		var e entry
		err := tx.QueryRow(`SELECT offset, record_start, created_ms, idempotency_key, body FROM entries
			WHERE stream_id = ? AND idempotency_key = ? AND offset <= ?`, seg.ID, key, upper).
			Scan(&e.Offset, &e.RecordStart, &e.CreatedMs, &e.IdempotencyKey, &e.Body)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return foldstream.Event{}, false, fmt.Errorf("append: look up idempotency key: %w", err)
		}
		ev, err := decodeEvent(row.Path, e)
		if err != nil {
			return foldstream.Event{}, false, err
		}
		return ev, true, nil
	}
	return foldstream.Event{}, false, nil
}

// Read limits (spec §13.2).
const (
	// DefaultReadLimit is the page size used when a read passes a limit <= 0.
	DefaultReadLimit = 500
	// MaxReadLimit is the largest page a read returns.
	MaxReadLimit = 1000
	// ReadBudgetBytes is a page's byte budget; a page always holds at least one event.
	ReadBudgetBytes = 8 << 20
)

// ReadOptions are per-call knobs of [Store.Read].
type ReadOptions struct {
	// IncludeEphemeral merges the ephemeral ring's events into the page: those inside the proven
	// span, and on an at-head page also those beyond the durable mark. They never count toward the
	// limit and never move the proof (spec §13.2).
	IncludeEphemeral bool
}

// Read returns durable events of the stream at path with offset > after, in offset order (spec
// §13.2). limit is clamped to [1, MaxReadLimit]; a limit <= 0 means DefaultReadLimit. The page
// stops before the event that would take it over ReadBudgetBytes. AtHead = not budget-cut and
// (fewer rows than limit or the last row reached the durable mark); ScannedThroughOffset is the
// durable mark on an at-head page, else the last row's offset, and never less than after — the
// proof never passes the durable mark. A missing stream reads as empty and at head.
func (s *Store) Read(ctx context.Context, path string, after int64, limit int, opts ReadOptions) (foldstream.ReadPage, error) {
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	limit = min(limit, MaxReadLimit)
	if after < 0 {
		after = 0
	}
	page := foldstream.ReadPage{ScannedThroughOffset: after, AtHead: true}
	var streamID int64 = -1
	err := s.readTx(ctx, func(q *sql.Tx) error {
		row, err := loadStreamByPath(q, path)
		if errors.Is(err, errNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		streamID = row.ID
		rows, cut, err := readEntries(q, row, after, limit, s.ev.readBudget)
		if err != nil {
			return err
		}
		page.Events = make([]foldstream.Event, 0, len(rows))
		for _, e := range rows {
			ev, err := decodeEvent(path, e)
			if err != nil {
				return err
			}
			page.Events = append(page.Events, ev)
		}
		mark := row.Tail
		var last int64
		if len(rows) > 0 {
			last = rows[len(rows)-1].Offset
		}
		page.AtHead = !cut && (len(rows) < limit || last >= mark)
		if page.AtHead {
			page.ScannedThroughOffset = max(after, mark)
		} else {
			page.ScannedThroughOffset = max(after, last)
		}
		return nil
	})
	if err != nil {
		return foldstream.ReadPage{}, err
	}
	if opts.IncludeEphemeral && streamID >= 0 {
		page.Events = s.mergeEphemerals(streamID, page.Events, after, page.ScannedThroughOffset, page.AtHead)
	}
	return page, nil
}
