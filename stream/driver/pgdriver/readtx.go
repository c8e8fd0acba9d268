package pgdriver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Reads of records, keys, producers, claims and checkpoints, in a read transaction (readTx).

// Records reads the rows in bounded chunks along the records primary key (a keyset cursor:
// end_pos > the last end read, LIMIT n). A reader that stops early — a page of a catch-up read
// that is full — leaves at most the rest of one chunk unread, which pgx then drains; an unbounded
// query would make it drain the whole rest of the stream, so reading a long stream page by page
// would be quadratic in its length. Chunks start small (a page usually needs few records) and
// double up to recordsChunkMax rows or about recordsChunkBytes, so a full scan costs few round
// trips. Each row is handed to fn straight off the connection: memory holds one record. fn must
// not run other statements on this transaction.
func (t *readTx) Records(ctx context.Context, streamID, after int64, fn func(driver.Record) (bool, error)) error {
	limit := recordsChunkMin
	for {
		n, bytes, last, more, err := t.recordsChunk(ctx, streamID, after, limit, fn)
		if err != nil || !more || n < limit {
			return err
		}
		after = last
		limit = min(2*limit, recordsChunkMax)
		if avg := bytes / int64(n); avg > 0 {
			limit = max(recordsChunkMin, min(limit, int(recordsChunkBytes/avg)))
		}
	}
}

// Bounds of one chunk of Records.
const (
	recordsChunkMin   = 8
	recordsChunkMax   = 1024
	recordsChunkBytes = 4 << 20
	// recordsWithinFirst is the first chunk of RecordsWithin in rows: the budget, not this,
	// usually ends it.
	recordsWithinFirst = 64
)

// RecordsWithin reads one page of records (driver.SizedRecordsReader): each chunk's query marks,
// of its LIMIT rows along the primary key, those the page takes — the first, those that fit
// whole, and the one after them while the page is less than half full — from octet_length, which
// reads a TOASTed body's stored length without fetching or decompressing it, and sends the
// bodies of those alone. So a page makes PostgreSQL fetch, decompress and send the records it
// takes, not a chunk it then drains. Chunks start at recordsWithinFirst rows and are sized to
// what is left of the budget when the LIMIT, not the budget, ends one (small records).
func (t *readTx) RecordsWithin(ctx context.Context, streamID, after int64, budget int, fn func(driver.Record) (bool, error)) (bool, error) {
	if budget <= 0 {
		return false, t.Records(ctx, streamID, after, fn)
	}
	// The page's first record is always taken: a half of at least one byte keeps it.
	left, half := int64(budget), max(1, int64(budget)/2)
	limit := recordsWithinFirst
	for {
		c, err := t.recordsChunkWithin(ctx, streamID, after, limit, left, half, fn)
		if err != nil || !c.more || c.stopped {
			return c.stopped, err
		}
		if c.rows < limit {
			return false, nil // the stream ended
		}
		after, left, half = c.last, left-c.size, half-c.size
		limit = max(recordsChunkMin, min(recordsChunkMax, int(left/max(1, c.size/int64(c.rows)))+2))
	}
}

// recordsWithinQuery reads one chunk of RecordsWithin: the LIMIT ($3) rows, each with whether the
// page takes it — its bodies through it total at most $4, or before it less than $5 — and its
// frames and body only when it does.
const recordsWithinQuery = `SELECT record_start, start_pos, end_pos, created_ms,
		CASE WHEN take THEN frames END, CASE WHEN take THEN body END, take FROM (
	SELECT *, (sum(len) OVER w <= $4 OR sum(len) OVER w - len < $5) AS take FROM (
		SELECT record_start, start_pos, end_pos, created_ms, frames, body, octet_length(body) AS len
		FROM records WHERE stream_id = $1 AND end_pos > $2 ORDER BY end_pos LIMIT $3) l
	WINDOW w AS (ORDER BY end_pos)) c
	ORDER BY end_pos`

// chunkWithin is what one chunk of RecordsWithin read: its rows up to the first the page does not
// take (stopped: there was one), the bytes of their bodies, the last End, and whether fn wants
// more.
type chunkWithin struct {
	rows          int
	size, last    int64
	more, stopped bool
}

// recordsChunkWithin reads one chunk of RecordsWithin and passes the records the page takes to fn.
func (t *readTx) recordsChunkWithin(ctx context.Context, streamID, after int64, limit int, left, half int64, fn func(driver.Record) (bool, error)) (c chunkWithin, err error) {
	rows, err := t.tx.Query(ctx, recordsWithinQuery, streamID, after, limit, left, half)
	if err != nil {
		return c, t.d.classify(fmt.Errorf("read records: %w", err))
	}
	// Rows after the first one not taken come without bodies: draining them costs little.
	defer rows.Close()
	for rows.Next() {
		r := driver.Record{StreamID: streamID}
		raw := rows.RawValues()
		var take bool
		if err := rows.Scan(&r.RecordStart, &r.Start, &r.End, &r.CreatedMs, nil, nil, &take); err != nil {
			return c, t.d.classify(fmt.Errorf("read records: %w", err))
		}
		if !take {
			c.stopped = true
			return c, nil
		}
		r.Frames, r.Body = raw[4], raw[5] // valid until the next row, as in recordsChunk
		if r.Body == nil {
			r.Body = []byte{}
		}
		c.rows++
		c.size += int64(len(r.Body))
		c.last = r.End
		more, err := fn(r)
		if err != nil {
			return c, err
		}
		if !more {
			return c, nil
		}
	}
	if err := rows.Err(); err != nil {
		return c, t.d.classify(fmt.Errorf("read records: %w", err))
	}
	c.more = true
	return c, nil
}

// recordsChunk reads up to limit records with End > after and passes them to fn. It returns how
// many it read, their size, the last End, and whether fn wants more.
func (t *readTx) recordsChunk(ctx context.Context, streamID, after int64, limit int, fn func(driver.Record) (bool, error)) (n int, size, last int64, more bool, err error) {
	rows, err := t.tx.Query(ctx, `SELECT record_start, start_pos, end_pos, created_ms, frames, body FROM records
		WHERE stream_id = $1 AND end_pos > $2 ORDER BY end_pos LIMIT $3`, streamID, after, limit)
	if err != nil {
		return 0, 0, 0, false, t.d.classify(fmt.Errorf("read records: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		r := driver.Record{StreamID: streamID}
		raw := rows.RawValues()
		if err := rows.Scan(&r.RecordStart, &r.Start, &r.End, &r.CreatedMs, nil, nil); err != nil {
			return n, size, last, false, t.d.classify(fmt.Errorf("read records: %w", err))
		}
		// The raw column bytes (binary format: bytea is its bytes) are valid until the next row,
		// as the driver contract allows, so no copy is made.
		r.Frames, r.Body = raw[4], raw[5]
		if r.Body == nil {
			r.Body = []byte{}
		}
		n++
		size += int64(len(r.Frames) + len(r.Body))
		last = r.End
		more, err := fn(r)
		if err != nil {
			return n, size, last, false, err
		}
		if !more {
			return n, size, last, false, nil
		}
	}
	if err := rows.Err(); err != nil {
		return n, size, last, false, t.d.classify(fmt.Errorf("read records: %w", err))
	}
	return n, size, last, true, nil
}

func (t *readTx) KeyOffset(ctx context.Context, streamID int64, key string) (int64, bool, error) {
	var off int64
	err := t.tx.QueryRow(ctx, `SELECT "offset" FROM record_keys WHERE stream_id = $1 AND key = $2`, streamID, key).Scan(&off)
	if isNoRows(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.d.classify(fmt.Errorf("look up idempotency key: %w", err))
	}
	return off, true, nil
}

func (t *readTx) Producer(ctx context.Context, streamID int64, id string) (driver.Producer, bool, error) {
	p := driver.Producer{ID: id}
	err := t.tx.QueryRow(ctx, `SELECT epoch, last_seq, updated_ms FROM producers WHERE stream_id = $1 AND producer_id = $2`,
		streamID, id).Scan(&p.Epoch, &p.LastSeq, &p.UpdatedMs)
	if isNoRows(err) {
		return driver.Producer{}, false, nil
	}
	if err != nil {
		return driver.Producer{}, false, t.d.classify(fmt.Errorf("load producer state: %w", err))
	}
	return p, true, nil
}

func (t *readTx) claims(ctx context.Context, query string, args ...any) ([]driver.Claim, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("load claims: %w", err))
	}
	defer rows.Close()
	var out []driver.Claim
	for rows.Next() {
		var c driver.Claim
		if err := rows.Scan(&c.Path, &c.Slug, &c.AtMs, &c.Failures); err != nil {
			return nil, t.d.classify(fmt.Errorf("load claims: %w", err))
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("load claims: %w", err))
	}
	return out, nil
}

func (t *readTx) Claims(ctx context.Context) ([]driver.Claim, error) {
	return t.claims(ctx, `SELECT path, slug, at_ms, failures FROM claims ORDER BY at_ms, path, slug`)
}

func (t *readTx) DueClaims(ctx context.Context, nowMs int64) ([]driver.Claim, error) {
	return t.claims(ctx, `SELECT path, slug, at_ms, failures FROM claims WHERE at_ms <= $1 ORDER BY at_ms, path, slug`, nowMs)
}

func (t *readTx) NextClaimAt(ctx context.Context) (int64, bool, error) {
	var next *int64
	if err := t.tx.QueryRow(ctx, `SELECT min(at_ms) FROM claims`).Scan(&next); err != nil {
		return 0, false, t.d.classify(fmt.Errorf("next claim: %w", err))
	}
	if next == nil {
		return 0, false, nil
	}
	return *next, true, nil
}

func (t *readTx) Checkpoint(ctx context.Context, scope, slug string) (foldtype.Checkpoint, bool, error) {
	var cp foldtype.Checkpoint
	var state *string
	err := t.tx.QueryRow(ctx, `SELECT reducer_version, reduced_through_offset, state FROM reduce_checkpoints WHERE scope = $1 AND slug = $2`,
		scope, slug).Scan(&cp.ReducerVersion, &cp.ReducedThroughOffset, &state)
	if isNoRows(err) {
		return foldtype.Checkpoint{}, false, nil
	}
	if err != nil {
		return foldtype.Checkpoint{}, false, t.d.classify(fmt.Errorf("read checkpoint %q: %w", slug, err))
	}
	if state != nil && *state != "" {
		cp.State = json.RawMessage(*state)
	}
	return cp, true, nil
}

// CheckpointsOfSlug reads slug's rows in scopes in one statement (driver.Reader).
func (t *readTx) CheckpointsOfSlug(ctx context.Context, slug string, scopes []string, fn func(scope string, cp foldtype.Checkpoint)) error {
	if len(scopes) == 0 {
		return nil
	}
	rows, err := t.tx.Query(ctx, `SELECT scope, reducer_version, reduced_through_offset, state FROM reduce_checkpoints
		WHERE slug = $1 AND scope = ANY($2::text[])`, slug, scopes)
	if err != nil {
		return t.d.classify(fmt.Errorf("read checkpoints of %q: %w", slug, err))
	}
	defer rows.Close()
	for rows.Next() {
		var scope string
		var cp foldtype.Checkpoint
		var state *string
		if err := rows.Scan(&scope, &cp.ReducerVersion, &cp.ReducedThroughOffset, &state); err != nil {
			return t.d.classify(fmt.Errorf("read checkpoints of %q: %w", slug, err))
		}
		if state != nil && *state != "" {
			cp.State = json.RawMessage(*state)
		}
		fn(scope, cp)
	}
	if err := rows.Err(); err != nil {
		return t.d.classify(fmt.Errorf("read checkpoints of %q: %w", slug, err))
	}
	return nil
}
