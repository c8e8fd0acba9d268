package sqlitedriver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// readTx implements driver.Reader over a read transaction or the writer's connection.
type readTx struct{ q querier }

// streamCols selects a stream row; the last column is the durable tail.
const streamCols = `s.id, s.path, s.content_type, s.state, s.created_ms, s.ttl_seconds, s.expires_at_ms,
	s.last_access_ms, s.closed, s.closed_by_producer, s.closed_by_epoch, s.closed_by_seq, s.forked_from,
	s.fork_offset, s.fork_sub_offset, s.tail, s.stream_seq, s.incarnation, s.paused,
	max(s.tail, coalesce((SELECT max(r.end_pos) FROM records r WHERE r.stream_id = s.id
		AND r.end_pos <= coalesce(s.hidden_from, 9223372036854775807)), 0))`

func scanStream(row interface{ Scan(...any) error }) (driver.Stream, error) {
	var r driver.Stream
	err := row.Scan(&r.ID, &r.Path, &r.ContentType, &r.State, &r.CreatedMs, &r.TTLSeconds, &r.ExpiresAtMs,
		&r.LastAccessMs, &r.Closed, &r.ClosedByProducer, &r.ClosedByEpoch, &r.ClosedBySeq, &r.ForkedFrom,
		&r.ForkOffset, &r.ForkSubOffset, &r.BaseTail, &r.StreamSeq, &r.Incarnation, &r.Paused, &r.Tail)
	return r, err
}

func (t *readTx) StreamByPath(ctx context.Context, path string) (driver.Stream, error) {
	r, err := scanStream(t.q.queryRow(ctx, `SELECT `+streamCols+` FROM streams s WHERE s.path = ?`, path))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Stream{}, driver.ErrNoStream
	}
	if err != nil {
		return driver.Stream{}, fmt.Errorf("load stream %q: %w", path, err)
	}
	return r, nil
}

func (t *readTx) StreamByID(ctx context.Context, id int64) (driver.Stream, error) {
	r, err := scanStream(t.q.queryRow(ctx, `SELECT `+streamCols+` FROM streams s WHERE s.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Stream{}, driver.ErrNoStream
	}
	if err != nil {
		return driver.Stream{}, fmt.Errorf("load stream %d: %w", id, err)
	}
	return r, nil
}

func (t *readTx) streams(ctx context.Context, what, query string, args ...any) ([]driver.Stream, error) {
	rows, err := t.q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []driver.Stream
	for rows.Next() {
		r, err := scanStream(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func (t *readTx) ChildStreams(ctx context.Context, id int64) ([]driver.Stream, error) {
	return t.streams(ctx, "load forks", `SELECT `+streamCols+` FROM streams s WHERE s.forked_from = ?`, id)
}

func (t *readTx) ListStreams(ctx context.Context, lq driver.ListQuery) ([]driver.Stream, error) {
	q := `SELECT ` + streamCols + ` FROM streams s WHERE s.state = 0 AND s.path > ?`
	if lq.Inclusive {
		q = `SELECT ` + streamCols + ` FROM streams s WHERE s.state = 0 AND s.path >= ?`
	}
	args := []any{lq.From}
	if lq.Below != "" {
		q += ` AND s.path < ?`
		args = append(args, lq.Below)
	}
	q += ` ORDER BY s.path LIMIT ?`
	args = append(args, lq.Limit)
	return t.streams(ctx, "list streams", q, args...)
}

func (t *readTx) CountStreams(ctx context.Context) (int, error) {
	var n int
	if err := t.q.queryRow(ctx, `SELECT count(*) FROM streams`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count streams: %w", err)
	}
	return n, nil
}

func (t *readTx) CollectCandidates(ctx context.Context, afterID, nowMs int64, limit int) ([]driver.Stream, error) {
	return t.streams(ctx, "collect expired streams", `SELECT `+streamCols+` FROM streams s WHERE s.id > ? AND (s.state = 1
		OR s.expires_at_ms <= ? OR (s.ttl_seconds IS NOT NULL AND s.last_access_ms + s.ttl_seconds * 1000 <= ?))
		ORDER BY s.id LIMIT ?`, afterID, nowMs, nowMs, limit)
}

func (t *readTx) Records(ctx context.Context, streamID, after int64, fn func(driver.Record) (bool, error)) error {
	// Records past a stream's visibility mark (a record still being written over several
	// transactions, see HideFrom) are read by nobody.
	rows, err := t.q.query(ctx, `SELECT record_start, start_pos, end_pos, created_ms, frames, body FROM records
		WHERE stream_id = ?1 AND end_pos > ?2
		AND end_pos <= coalesce((SELECT hidden_from FROM streams WHERE id = ?1), 9223372036854775807)
		ORDER BY end_pos`, streamID, after)
	if err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := driver.Record{StreamID: streamID}
		var frames, body sql.RawBytes
		if err := rows.Scan(&r.RecordStart, &r.Start, &r.End, &r.CreatedMs, &frames, &body); err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		r.Frames, r.Body = frames, body
		more, err := fn(r)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read records: %w", err)
	}
	return nil
}

func (t *readTx) KeyOffset(ctx context.Context, streamID int64, key string) (int64, bool, error) {
	var off int64
	err := t.q.queryRow(ctx, `SELECT offset FROM record_keys WHERE stream_id = ? AND key = ?`, streamID, key).Scan(&off)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	return off, true, nil
}

func (t *readTx) Producer(ctx context.Context, streamID int64, id string) (driver.Producer, bool, error) {
	p := driver.Producer{ID: id}
	err := t.q.queryRow(ctx, `SELECT epoch, last_seq, updated_ms FROM producers WHERE stream_id = ? AND producer_id = ?`,
		streamID, id).Scan(&p.Epoch, &p.LastSeq, &p.UpdatedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Producer{}, false, nil
	}
	if err != nil {
		return driver.Producer{}, false, fmt.Errorf("load producer state: %w", err)
	}
	return p, true, nil
}

func (t *readTx) claims(ctx context.Context, query string, args ...any) ([]driver.Claim, error) {
	rows, err := t.q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.Claim
	for rows.Next() {
		var c driver.Claim
		if err := rows.Scan(&c.Path, &c.Slug, &c.AtMs, &c.Failures); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (t *readTx) Claims(ctx context.Context) ([]driver.Claim, error) {
	return t.claims(ctx, `SELECT path, slug, at_ms, failures FROM claims ORDER BY at_ms, path, slug`)
}

func (t *readTx) DueClaims(ctx context.Context, nowMs int64) ([]driver.Claim, error) {
	return t.claims(ctx, `SELECT path, slug, at_ms, failures FROM claims WHERE at_ms <= ? ORDER BY at_ms, path, slug`, nowMs)
}

func (t *readTx) NextClaimAt(ctx context.Context) (int64, bool, error) {
	var next sql.NullInt64
	if err := t.q.queryRow(ctx, `SELECT MIN(at_ms) FROM claims`).Scan(&next); err != nil {
		return 0, false, err
	}
	return next.Int64, next.Valid, nil
}

func (t *readTx) Checkpoint(ctx context.Context, scope, slug string) (foldtype.Checkpoint, bool, error) {
	var cp foldtype.Checkpoint
	var state sql.NullString
	err := t.q.queryRow(ctx, `SELECT reducer_version, reduced_through_offset, state FROM reduce_checkpoints WHERE scope = ? AND slug = ?`,
		scope, slug).Scan(&cp.ReducerVersion, &cp.ReducedThroughOffset, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return foldtype.Checkpoint{}, false, nil
	}
	if err != nil {
		return foldtype.Checkpoint{}, false, fmt.Errorf("read checkpoint %q: %w", slug, err)
	}
	if state.Valid && state.String != "" {
		cp.State = json.RawMessage(state.String)
	}
	return cp, true, nil
}

// checkpointRowsQuery is the query of CheckpointRows for n slugs.
func checkpointRowsQuery(n int) string {
	if n == 2 {
		return checkpointRows2 // an engine's checkpoint and work-started marker
	}
	return checkpointRowsPrefix + strings.Repeat("?, ", n-1) + "?)"
}

const checkpointRowsPrefix = `SELECT slug, reducer_version, reduced_through_offset, state FROM reduce_checkpoints WHERE scope = ? AND slug IN (`

const checkpointRows2 = checkpointRowsPrefix + `?, ?)`

// CheckpointRows reads the rows of slugs in one query (driver.CheckpointRowsReader).
func (t *readTx) CheckpointRows(ctx context.Context, scope string, slugs []string, fn func(slug string, cp foldtype.Checkpoint)) error {
	if len(slugs) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(slugs))
	args = append(args, scope)
	for _, slug := range slugs {
		args = append(args, slug)
	}
	rows, err := t.q.query(ctx, checkpointRowsQuery(len(slugs)), args...)
	if err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var slug string
		var cp foldtype.Checkpoint
		var state sql.NullString
		if err := rows.Scan(&slug, &cp.ReducerVersion, &cp.ReducedThroughOffset, &state); err != nil {
			return fmt.Errorf("read checkpoints: %w", err)
		}
		if state.Valid && state.String != "" {
			cp.State = json.RawMessage(state.String)
		}
		fn(slug, cp)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	return nil
}

var _ driver.CheckpointRowsReader = (*readTx)(nil)

// checkpointsOfSlugQuery reads one slug's rows in the scopes of a JSON array: one statement
// text, prepared once, for any number of scopes (a list of placeholders would be a statement
// per length, each taking a place in the prepared-statement cache).
const checkpointsOfSlugQuery = `SELECT scope, reducer_version, reduced_through_offset, state FROM reduce_checkpoints
	WHERE slug = ? AND scope IN (SELECT value FROM json_each(?))`

// CheckpointsOfSlug reads slug's rows in scopes in one query (driver.Reader).
func (t *readTx) CheckpointsOfSlug(ctx context.Context, slug string, scopes []string, fn func(scope string, cp foldtype.Checkpoint)) error {
	if len(scopes) == 0 {
		return nil
	}
	list, err := jsonList(scopes)
	if err != nil {
		return fmt.Errorf("read checkpoints of %q: %w", slug, err)
	}
	rows, err := t.q.query(ctx, checkpointsOfSlugQuery, slug, list)
	if err != nil {
		return fmt.Errorf("read checkpoints of %q: %w", slug, err)
	}
	defer rows.Close()
	for rows.Next() {
		var scope string
		var cp foldtype.Checkpoint
		var state sql.NullString
		if err := rows.Scan(&scope, &cp.ReducerVersion, &cp.ReducedThroughOffset, &state); err != nil {
			return fmt.Errorf("read checkpoints of %q: %w", slug, err)
		}
		if state.Valid && state.String != "" {
			cp.State = json.RawMessage(state.String)
		}
		fn(scope, cp)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read checkpoints of %q: %w", slug, err)
	}
	return nil
}

// jsonList is the JSON array of ss, the one argument of a query that selects by a list of
// values (json_each). Every string must be valid UTF-8, as every path and slug is: JSON would
// carry another string in its place, and the query would find nothing for it.
func jsonList(ss []string) (string, error) {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return "", fmt.Errorf("%q is not valid UTF-8", s)
		}
	}
	b, err := json.Marshal(ss)
	return string(b), err
}

// HasStreamlessCheckpoints reports whether a checkpoint row's scope is a path no stream row holds
// (driver.StreamlessCheckpointFinder): one probe of the streams' path index per distinct scope.
func (t *readTx) HasStreamlessCheckpoints(ctx context.Context) (bool, error) {
	var one int
	err := t.q.queryRow(ctx, `SELECT 1 FROM (SELECT DISTINCT scope FROM reduce_checkpoints) c
		WHERE NOT EXISTS (SELECT 1 FROM streams s WHERE s.path = c.scope) LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read checkpoints: %w", err)
	}
	return true, nil
}

var _ driver.StreamlessCheckpointFinder = (*readTx)(nil)

// The write side.

const insertStream = `INSERT INTO streams(path, content_type, state, created_ms, ttl_seconds, expires_at_ms,
		last_access_ms, closed, forked_from, fork_offset, fork_sub_offset, tail, incarnation)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (t *writeTx) InsertStream(ctx context.Context, s driver.Stream) (int64, error) {
	res, err := t.q.exec(ctx, insertStream,
		s.Path, s.ContentType, s.State, s.CreatedMs, s.TTLSeconds, s.ExpiresAtMs, s.LastAccessMs, s.Closed,
		s.ForkedFrom, s.ForkOffset, s.ForkSubOffset, s.BaseTail, s.Incarnation)
	if err != nil {
		return 0, classify(fmt.Errorf("create stream: %w", err))
	}
	return res.LastInsertId()
}

// InsertStreamIfAbsent is InsertStream that leaves a taken path alone (driver.FreshStreamInserter):
// the UNIQUE index on path turns the insert into nothing, and the change count tells which.
func (t *writeTx) InsertStreamIfAbsent(ctx context.Context, s driver.Stream) (int64, bool, error) {
	var res sql.Result
	var err error
	if plainStream(s) {
		// The common create: every other column at its default, five arguments to bind instead
		// of thirteen (and no NULL wrappers to convert).
		res, err = t.q.exec(ctx, insertPlainStream, s.Path, s.ContentType, s.CreatedMs, nullable(s.TTLSeconds), nullable(s.ExpiresAtMs))
	} else {
		res, err = t.q.exec(ctx, insertStream+` ON CONFLICT(path) DO NOTHING`,
			s.Path, s.ContentType, s.State, s.CreatedMs, s.TTLSeconds, s.ExpiresAtMs, s.LastAccessMs, s.Closed,
			s.ForkedFrom, s.ForkOffset, s.ForkSubOffset, s.BaseTail, s.Incarnation)
	}
	if err != nil {
		return 0, false, classify(fmt.Errorf("create stream: %w", err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, fmt.Errorf("create stream: %w", err)
	}
	if n == 0 {
		return 0, false, nil
	}
	id, err := res.LastInsertId()
	return id, err == nil, err
}

// insertPlainStream is InsertStreamIfAbsent's statement for a plain stream (plainStream): the
// columns it leaves out take their defaults (live, open, no fork, base tail 0, incarnation 0).
const insertPlainStream = `INSERT INTO streams(path, content_type, created_ms, last_access_ms, ttl_seconds, expires_at_ms)
		VALUES (?1, ?2, ?3, ?3, ?4, ?5) ON CONFLICT(path) DO NOTHING`

// plainStream reports whether s can be inserted by insertPlainStream: every column it leaves out
// at its default, and last access at creation.
func plainStream(s driver.Stream) bool {
	return s.State == 0 && !s.Closed && !s.ForkedFrom.Valid && s.ForkOffset == 0 && s.ForkSubOffset == 0 &&
		s.BaseTail == 0 && s.Incarnation == 0 && s.LastAccessMs == s.CreatedMs
}

// nullable is v's value as a statement argument: nil for NULL.
func nullable(v sql.NullInt64) any {
	if !v.Valid {
		return nil
	}
	return v.Int64
}

func (t *writeTx) UpdateStream(ctx context.Context, id int64, u driver.StreamUpdate) error {
	var sets []string
	var args []any
	if u.LastAccessMs != nil {
		sets, args = append(sets, `last_access_ms = max(last_access_ms, ?)`), append(args, *u.LastAccessMs)
	}
	if u.StreamSeq != nil {
		sets, args = append(sets, `stream_seq = ?`), append(args, *u.StreamSeq)
	}
	if c := u.Close; c != nil {
		var by sql.NullString
		var epoch, seq sql.NullInt64
		if c.Producer != "" {
			by = sql.NullString{String: c.Producer, Valid: true}
			epoch = sql.NullInt64{Int64: c.Epoch, Valid: true}
			seq = sql.NullInt64{Int64: c.Seq, Valid: true}
		}
		sets = append(sets, `closed = 1, closed_by_producer = ?, closed_by_epoch = ?, closed_by_seq = ?`)
		args = append(args, by, epoch, seq)
	}
	if u.State != nil {
		sets, args = append(sets, `state = ?`), append(args, *u.State)
	}
	if u.Incarnation != nil {
		sets, args = append(sets, `incarnation = ?`), append(args, *u.Incarnation)
	}
	if u.Paused != nil {
		sets, args = append(sets, `paused = ?`), append(args, *u.Paused)
	}
	if len(sets) == 0 {
		return nil
	}
	args = append(args, id)
	if _, err := t.q.exec(ctx, `UPDATE streams SET `+strings.Join(sets, ", ")+` WHERE id = ?`, args...); err != nil {
		return classify(fmt.Errorf("update stream: %w", err))
	}
	return nil
}

func (t *writeTx) DeleteStream(ctx context.Context, id int64) error {
	for _, q := range []string{
		`DELETE FROM records WHERE stream_id = ?`,
		`DELETE FROM record_keys WHERE stream_id = ?`,
		`DELETE FROM producers WHERE stream_id = ?`,
		`DELETE FROM streams WHERE id = ?`,
	} {
		if _, err := t.q.exec(ctx, q, id); err != nil {
			return classify(fmt.Errorf("delete stream: %w", err))
		}
	}
	return nil
}

func (t *writeTx) DeleteProcessorState(ctx context.Context, path string) error {
	for _, q := range []string{
		`DELETE FROM reduce_checkpoints WHERE scope = ?`,
		`DELETE FROM claims WHERE path = ?`,
		`DELETE FROM processor_states WHERE path = ?`,
		`DELETE FROM processor_parked WHERE path = ?`,
	} {
		if _, err := t.q.exec(ctx, q, path); err != nil {
			return classify(fmt.Errorf("delete processor state: %w", err))
		}
	}
	return nil
}

func (t *writeTx) InsertRecord(ctx context.Context, r driver.Record) error {
	var frames any
	if r.Frames != nil {
		frames = r.Frames
	}
	if _, err := t.q.exec(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, r.StreamID, r.RecordStart, r.Start, r.End, r.CreatedMs, frames, r.Body); err != nil {
		return classify(fmt.Errorf("append: %w", err))
	}
	for _, k := range r.Keys {
		if _, err := t.q.exec(ctx, `INSERT INTO record_keys(stream_id, key, offset) VALUES (?, ?, ?)`,
			r.StreamID, k.Key, k.Offset); err != nil {
			return classify(fmt.Errorf("append: register idempotency key: %w", err))
		}
	}
	return nil
}

// HideFrom sets the stream's visibility mark: its records with End > from are invisible to every
// reader (and to the stream's tail) until ShowAll, so a record written over several transactions is
// never seen in part. The mark is durable: a crash before ShowAll leaves the hidden slices behind,
// and the next Writer removes them (dropHidden).
func (t *writeTx) HideFrom(ctx context.Context, streamID, from int64) error {
	if _, err := t.q.exec(ctx, `UPDATE streams SET hidden_from = ? WHERE id = ?`, from, streamID); err != nil {
		return classify(fmt.Errorf("hide a record being written: %w", err))
	}
	return nil
}

// ShowAll clears the stream's visibility mark: every record becomes visible.
func (t *writeTx) ShowAll(ctx context.Context, streamID int64) error {
	if _, err := t.q.exec(ctx, `UPDATE streams SET hidden_from = NULL WHERE id = ?`, streamID); err != nil {
		return classify(fmt.Errorf("show a written record: %w", err))
	}
	return nil
}

// DropHidden removes the records past the stream's visibility mark and clears the mark.
func (t *writeTx) DropHidden(ctx context.Context, streamID int64) error {
	return dropHidden(ctx, t.q, `AND s.id = ?`, streamID)
}

// dropHidden removes the records hidden by a visibility mark of the streams the condition names
// (with their idempotency keys past the mark) and clears the marks.
func dropHidden(ctx context.Context, q querier, cond string, args ...any) error {
	for _, stmt := range []string{
		`DELETE FROM records WHERE id IN (SELECT r.id FROM streams s JOIN records r ON r.stream_id = s.id
			WHERE s.hidden_from IS NOT NULL ` + cond + ` AND r.end_pos > s.hidden_from)`,
		`DELETE FROM record_keys WHERE EXISTS (SELECT 1 FROM streams s WHERE s.id = record_keys.stream_id
			AND s.hidden_from IS NOT NULL ` + cond + ` AND record_keys.offset > s.hidden_from)`,
		`UPDATE streams AS s SET hidden_from = NULL WHERE s.hidden_from IS NOT NULL ` + cond,
	} {
		if _, err := q.exec(ctx, stmt, args...); err != nil {
			return classify(fmt.Errorf("drop a partly written record: %w", err))
		}
	}
	return nil
}

func (t *writeTx) PutProducer(ctx context.Context, streamID int64, p driver.Producer) error {
	if _, err := t.q.exec(ctx, `INSERT INTO producers(stream_id, producer_id, epoch, last_seq, updated_ms) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(stream_id, producer_id) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq, updated_ms = excluded.updated_ms`,
		streamID, p.ID, p.Epoch, p.LastSeq, p.UpdatedMs); err != nil {
		return classify(fmt.Errorf("save producer state: %w", err))
	}
	return nil
}

func (t *writeTx) PutClaim(ctx context.Context, c driver.Claim) error {
	_, err := t.q.exec(ctx, `INSERT INTO claims(path, slug, at_ms, failures) VALUES (?, ?, ?, ?)
		ON CONFLICT(path, slug) DO UPDATE SET at_ms = excluded.at_ms, failures = excluded.failures`,
		c.Path, c.Slug, c.AtMs, c.Failures)
	return classify(err)
}

func (t *writeTx) DeleteClaim(ctx context.Context, c driver.Claim, exact bool) error {
	var err error
	if exact {
		_, err = t.q.exec(ctx, `DELETE FROM claims WHERE path = ? AND slug = ? AND at_ms = ? AND failures = ?`,
			c.Path, c.Slug, c.AtMs, c.Failures)
	} else {
		_, err = t.q.exec(ctx, `DELETE FROM claims WHERE path = ? AND slug = ?`, c.Path, c.Slug)
	}
	return classify(err)
}

// checkFence fails with LEASE_LOST when f is set and its lease is no longer held at its
// generation.
func (t *writeTx) checkFence(f *driver.Fence, what string) error {
	if f == nil || t.w.d.leases.generation(f.Key) == f.Generation {
		return nil
	}
	e := foldtype.NewError(foldtype.CodeLeaseLost, map[string]any{"lease": f.Key, "generation": f.Generation},
		"%s: lease %q is no longer held at generation %d; nothing was written", what, f.Key, f.Generation)
	e.Retryable = false
	return e
}

// CheckFence is checkFence, for the store's fenced appends.
func (t *writeTx) CheckFence(ctx context.Context, f *driver.Fence, what string) error {
	return t.checkFence(f, what)
}

func (t *writeTx) WriteCheckpoint(ctx context.Context, w driver.CheckpointWrite) error {
	if err := t.checkFence(w.Fence, fmt.Sprintf("write checkpoint %q", w.Slug)); err != nil {
		return err
	}
	var state any
	if w.StateChanged && w.Checkpoint.State != nil {
		state = string(w.Checkpoint.State)
	}
	if _, err := t.q.exec(ctx, `INSERT INTO reduce_checkpoints (scope, slug, reducer_version, reduced_through_offset, state)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (scope, slug) DO UPDATE SET
		  reducer_version = excluded.reducer_version,
		  reduced_through_offset = excluded.reduced_through_offset,
		  state = COALESCE(excluded.state, reduce_checkpoints.state)`,
		w.Scope, w.Slug, w.Checkpoint.ReducerVersion, w.Checkpoint.ReducedThroughOffset, state); err != nil {
		return classify(fmt.Errorf("write checkpoint %q: %w", w.Slug, err))
	}
	for _, slug := range w.Remove {
		if _, err := t.q.exec(ctx, `DELETE FROM reduce_checkpoints WHERE scope = ? AND slug = ?`, w.Scope, slug); err != nil {
			return classify(fmt.Errorf("write checkpoint %q: delete %q: %w", w.Slug, slug, err))
		}
	}
	return nil
}
