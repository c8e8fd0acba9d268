package stream

import (
	"database/sql"
	"errors"
	"fmt"
)

// querier is what both a read transaction (*sql.Tx) and a write handle (*Tx) offer.
type querier interface {
	Query(query string, args ...any) (*sql.Rows, error)
	QueryRow(query string, args ...any) *sql.Row
}

var (
	_ querier = (*sql.Tx)(nil)
	_ querier = (*Tx)(nil)
)

// streamRow is one row of the streams table.
type streamRow struct {
	ID               int64
	Path             string
	ContentType      string
	State            int // 0 live, 1 soft-deleted
	CreatedMs        int64
	TTLSeconds       sql.NullInt64
	ExpiresAtMs      sql.NullInt64
	LastAccessMs     int64
	Closed           bool
	ClosedByProducer sql.NullString
	ClosedByEpoch    sql.NullInt64
	ClosedBySeq      sql.NullInt64
	ForkedFrom       sql.NullInt64
	ForkOffset       int64
	ForkSubOffset    int64
	Tail             int64
	StreamSeq        sql.NullString
	Incarnation      int64
}

const streamCols = `id, path, content_type, state, created_ms, ttl_seconds, expires_at_ms, last_access_ms,
	closed, closed_by_producer, closed_by_epoch, closed_by_seq, forked_from, fork_offset, fork_sub_offset,
	tail, stream_seq, incarnation`

func scanStream(row interface{ Scan(...any) error }) (*streamRow, error) {
	var r streamRow
	err := row.Scan(&r.ID, &r.Path, &r.ContentType, &r.State, &r.CreatedMs, &r.TTLSeconds, &r.ExpiresAtMs,
		&r.LastAccessMs, &r.Closed, &r.ClosedByProducer, &r.ClosedByEpoch, &r.ClosedBySeq, &r.ForkedFrom,
		&r.ForkOffset, &r.ForkSubOffset, &r.Tail, &r.StreamSeq, &r.Incarnation)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// errNoStream is returned by loadStream* when no row matches.
var errNoStream = errors.New("no such stream")

// loadStreamByPath returns the stream row at path, or errNoStream. It does not judge expiry or
// soft deletion; callers do.
func loadStreamByPath(q querier, path string) (*streamRow, error) {
	r, err := scanStream(q.QueryRow(`SELECT `+streamCols+` FROM streams WHERE path = ?`, path))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoStream
	}
	if err != nil {
		return nil, fmt.Errorf("load stream %s: %w", quotePath(path), err)
	}
	return r, nil
}

// loadStreamByID returns the stream row with id, or errNoStream.
func loadStreamByID(q querier, id int64) (*streamRow, error) {
	r, err := scanStream(q.QueryRow(`SELECT `+streamCols+` FROM streams WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoStream
	}
	if err != nil {
		return nil, fmt.Errorf("load stream %d: %w", id, err)
	}
	return r, nil
}

// entry is one row of the entries table.
type entry struct {
	Offset         int64
	RecordStart    int64
	CreatedMs      int64
	IdempotencyKey sql.NullString
	Body           []byte
}

// segment is a run of one stream's entries visible through a (possibly forked) stream: offsets in
// (0, Through] of stream ID (Through < 0 means unbounded).
type segment struct {
	ID      int64
	Through int64
}

// segmentsOf returns the segments a read of stream r walks, oldest ancestor first: a fork sees its
// source's entries up to its fork offset (recursively), then its own.
func segmentsOf(q querier, r *streamRow) ([]segment, error) {
	segs := []segment{{ID: r.ID, Through: -1}}
	cur := r
	limit := int64(-1)
	for cur.ForkedFrom.Valid {
		through := cur.ForkOffset
		if limit >= 0 && limit < through {
			through = limit
		}
		parent, err := loadStreamByID(q, cur.ForkedFrom.Int64)
		if err != nil {
			return nil, fmt.Errorf("load fork source of %s: %w", quotePath(cur.Path), err)
		}
		segs = append(segs, segment{ID: parent.ID, Through: through})
		limit = through
		cur = parent
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs, nil
}

// readEntries returns up to limit entries with offset > after visible through stream r (fork
// chains included), in offset order. It stops before the entry that would take the bodies past
// maxBytes, but always returns at least one entry when there is one; budgetCut reports that it
// stopped for the budget.
func readEntries(q querier, r *streamRow, after int64, limit int, maxBytes int) (rows []entry, budgetCut bool, err error) {
	segs, err := segmentsOf(q, r)
	if err != nil {
		return nil, false, err
	}
	total := 0
	for _, seg := range segs {
		if len(rows) >= limit {
			break
		}
		if seg.Through >= 0 && seg.Through <= after {
			continue
		}
		upper := seg.Through
		if upper < 0 {
			upper = 1<<63 - 1
		}
		res, err := q.Query(`SELECT offset, record_start, created_ms, idempotency_key, body FROM entries
			WHERE stream_id = ? AND offset > ? AND offset <= ? ORDER BY offset LIMIT ?`,
			seg.ID, after, upper, limit-len(rows))
		if err != nil {
			return nil, false, fmt.Errorf("read entries: %w", err)
		}
		for res.Next() {
			var e entry
			if err := res.Scan(&e.Offset, &e.RecordStart, &e.CreatedMs, &e.IdempotencyKey, &e.Body); err != nil {
				res.Close()
				return nil, false, fmt.Errorf("read entries: %w", err)
			}
			if len(rows) > 0 && total+len(e.Body) > maxBytes {
				res.Close()
				return rows, true, nil
			}
			total += len(e.Body)
			rows = append(rows, e)
		}
		if err := res.Err(); err != nil {
			res.Close()
			return nil, false, fmt.Errorf("read entries: %w", err)
		}
		res.Close()
		if len(rows) > 0 {
			after = rows[len(rows)-1].Offset
		}
	}
	return rows, false, nil
}
