package pgdriver

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// readTx implements driver.Reader over a read transaction or the writer's transaction.
type readTx struct {
	d  *Driver
	tx querier
}

// streamCols selects a stream row; the last column is the durable tail (the larger of the stored
// base tail and the last record's end), found through the records primary key.
const streamCols = `s.id, s.path, s.content_type, s.state, s.created_ms, s.ttl_seconds, s.expires_at_ms,
	s.last_access_ms, s.closed, s.closed_by_producer, s.closed_by_epoch, s.closed_by_seq, s.forked_from,
	s.fork_offset, s.fork_sub_offset, s.tail, s.stream_seq, s.incarnation, s.paused,
	greatest(s.tail, coalesce((SELECT r.end_pos FROM records r WHERE r.stream_id = s.id ORDER BY r.end_pos DESC LIMIT 1), 0)),
	` + highestExpr

// highestExpr is the highest offset handed out on stream s (docs/postgres.md#ephemeral-events):
// the stream_heads row, or — when a database crash emptied that unlogged table, or on a standby
// promoted since — the stream's logged reserve, which is never below an offset handed out.
const highestExpr = `coalesce((SELECT h.highest FROM stream_heads h WHERE h.stream_id = s.id),
	(SELECT v.reserved FROM stream_reserves v WHERE v.stream_id = s.id), 0)`

func scanStream(row pgx.Row) (driver.Stream, error) {
	var r driver.Stream
	err := row.Scan(&r.ID, &r.Path, &r.ContentType, &r.State, &r.CreatedMs, &r.TTLSeconds, &r.ExpiresAtMs,
		&r.LastAccessMs, &r.Closed, &r.ClosedByProducer, &r.ClosedByEpoch, &r.ClosedBySeq, &r.ForkedFrom,
		&r.ForkOffset, &r.ForkSubOffset, &r.BaseTail, &r.StreamSeq, &r.Incarnation, &r.Paused, &r.Tail, &r.Highest)
	return r, err
}

func (t *readTx) StreamByPath(ctx context.Context, path string) (driver.Stream, error) {
	return t.streamByPath(ctx, path)
}

// StreamByPath in a write transaction reads the row, and takes its stream's lock when that is free
// at once, in one round trip: the store locks the stream and reads the row again right after
// (docs/postgres.md#writes-round-trips), and this answers both. When the path has no stream, it
// takes the path's advisory lock and looks again before answering ErrNoStream, so of two nodes
// creating the same stream at once the second waits for the first's commit and then finds its row
// (instead of failing on the unique path).
func (t *writeTx) StreamByPath(ctx context.Context, path string) (driver.Stream, error) {
	var r driver.Stream
	var err error
	if r, ok := t.prefetched[path]; ok && t.p != nil {
		// Read under its lock, which the transaction still holds, and not written since.
		delete(t.prefetched, path)
		t.fresh, t.freshOps = r, t.p.ops
		return r, nil
	}
	if t.p != nil {
		r, err = t.lockingStreamByPath(ctx, path)
	} else {
		r, err = t.streamByPath(ctx, path)
	}
	if err != driver.ErrNoStream {
		return r, err
	}
	if err := t.lock(ctx, t.d.pathCls, int32(hashPath(path))); err != nil {
		return driver.Stream{}, err
	}
	return t.streamByPath(ctx, path)
}

// lockingStreamByPath try-locks the stream at path (a lock that is not free at once is left to
// LockStream, which avoids deadlocks) and then reads its row, in one round trip. A row read under
// the lock is kept for the StreamByID that follows it.
func (t *writeTx) lockingStreamByPath(ctx context.Context, path string) (driver.Stream, error) {
	t.fresh = driver.Stream{}
	br, err := t.p.sendAll(ctx,
		queued{sql: `SELECT id, pg_try_advisory_xact_lock($2::int4, ((id << 32) >> 32)::int4) FROM streams WHERE path = $1`, args: []any{path, t.d.lockCls}},
		queued{sql: `SELECT ` + streamCols + ` FROM streams s WHERE s.path = $1`, args: []any{path}})
	if err != nil {
		return driver.Stream{}, t.d.classify(fmt.Errorf("load stream %q: %w", path, err))
	}
	defer br.Close()
	var id int64
	var locked bool
	if err := br.QueryRow().Scan(&id, &locked); err != nil && !isNoRows(err) {
		return driver.Stream{}, t.d.classify(fmt.Errorf("lock stream %q: %w", path, err))
	}
	if locked {
		t.take(lockID{t.d.lockCls, int32(id)})
	}
	r, err := scanStream(br.QueryRow())
	if isNoRows(err) {
		return driver.Stream{}, driver.ErrNoStream
	}
	if err != nil {
		return driver.Stream{}, t.d.classify(fmt.Errorf("load stream %q: %w", path, err))
	}
	if locked && r.ID == id {
		t.fresh, t.freshOps = r, t.p.ops
	}
	return r, nil
}

// PrefetchStreams try-locks the streams at paths and then reads their rows, in one round trip
// (driver.StreamPrefetcher). The rows of the streams it locked are kept for StreamByPath until the
// transaction writes to one of them (forgetRow) or releases its locks (split).
func (t *writeTx) PrefetchStreams(ctx context.Context, paths []string) error {
	if t.p == nil || len(paths) == 0 {
		return nil
	}
	br, err := t.p.sendAll(ctx,
		queued{sql: `SELECT id FROM streams WHERE path = ANY($1) AND pg_try_advisory_xact_lock($2::int4, ((id << 32) >> 32)::int4)`, args: []any{paths, t.d.lockCls}},
		queued{sql: `SELECT ` + streamCols + ` FROM streams s WHERE s.path = ANY($1)`, args: []any{paths}})
	if err != nil {
		return t.d.classify(fmt.Errorf("load streams: %w", err))
	}
	defer br.Close()
	locked := make(map[int64]bool, len(paths))
	rows, err := br.Query()
	if err == nil {
		for rows.Next() {
			var id int64
			if err = rows.Scan(&id); err != nil {
				break
			}
			locked[id] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return t.d.classify(fmt.Errorf("lock streams: %w", err))
	}
	for id := range locked {
		t.take(lockID{t.d.lockCls, int32(id)})
	}
	rows, err = br.Query()
	if err != nil {
		return t.d.classify(fmt.Errorf("load streams: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanStream(rows)
		if err != nil {
			return t.d.classify(fmt.Errorf("load streams: %w", err))
		}
		if locked[r.ID] {
			if t.prefetched == nil {
				t.prefetched = make(map[string]driver.Stream, len(locked))
			}
			t.prefetched[r.Path] = r
		}
	}
	if err := rows.Err(); err != nil {
		return t.d.classify(fmt.Errorf("load streams: %w", err))
	}
	return nil
}

// ExpectStream queues the check of driver.StreamExpecter: try-lock the stream, then, in a statement
// of its own (so that it reads the row after the lock, READ COMMITTED taking a snapshot per
// statement), compare the row with want. Either failing raises FS001 (foldstream_expect_stream),
// which aborts the rest of the round trip. The checks queued until the next flush go together, in
// two statements for all (pipeline.expect); one queued in a function whose SAVEPOINT was already
// sent goes in place, as two statements of its own. The lock counts as held from now on, and the
// current write function relies on it (split may not release it).
func (t *writeTx) ExpectStream(ctx context.Context, want driver.Stream, highest int64) error {
	if t.p == nil {
		return fmt.Errorf("check stream %q: not a write transaction of the store", want.Path)
	}
	key := int32(want.ID)
	if t.p.failed != nil {
		return t.d.classify(fmt.Errorf("check stream %q: %w", want.Path, t.p.failed))
	}
	k := lockID{t.d.lockCls, key}
	if t.p.expect(want, highest) {
		// Sent with the other checks queued before the next flush, outside every savepoint: a
		// rollback to the current savepoint keeps the lock.
		t.held[k] = true
		t.takenInSp = slices.DeleteFunc(t.takenInSp, func(l lockID) bool { return l == k })
	} else {
		if _, err := t.p.Exec(ctx, `SELECT foldstream_expect_stream(pg_try_advisory_xact_lock($1::int4, $2::int4), $3)`,
			t.d.lockCls, key, want.ID); err != nil {
			return t.d.classify(fmt.Errorf("check stream %q: %w", want.Path, err))
		}
		if _, err := t.p.Exec(ctx, expectStreamQuery, want.ID, want.ContentType, want.State, want.TTLSeconds, want.ExpiresAtMs,
			want.Closed, want.ClosedByProducer, want.ClosedByEpoch, want.ClosedBySeq, want.ForkedFrom, want.ForkOffset,
			want.ForkSubOffset, want.BaseTail, want.StreamSeq, want.Incarnation, want.Paused, want.Tail, highest); err != nil {
			return t.d.classify(fmt.Errorf("check stream %q: %w", want.Path, err))
		}
		t.take(k)
	}
	if t.inSp {
		if t.usedInSp == nil {
			t.usedInSp = make(map[lockID]bool)
		}
		t.usedInSp[k] = true
	}
	return nil
}

// expectStreamQuery is ExpectStream's check of the row: every stored column the store decides
// on, the durable tail $17, and the highest offset handed out at most $18.
//
// The durable tail is the larger of the row's base tail and the last record's end (streamCols),
// and the checks of ExpectStream compare it with the expected T without finding that last end:
// max(base, last end) = T holds exactly when base <= T, no record ends past T, and T is the base
// or the first record end from T on. Each record probe reads the first entry of the records
// primary key from (stream, T) forwards, where finding the last end scans the key backwards from
// the stream's end, which cost PostgreSQL about a sixth more per check of a group
// (docs/postgres.md#writes-round-trips). The highest offset handed out is checked against the
// stream_heads row by its key: none above the given one (no row: nothing recorded).
//
// Both record probes ask for a first row in key order (ORDER BY end_pos LIMIT 1), never EXISTS or
// any row. The checks are prepared statements, which PostgreSQL runs with a generic plan costed
// from the last ANALYZE; when that found most records in one stream (the records table grew
// since), it answers an EXISTS, or a subquery that needs any row, with a sequential scan that
// stops at its first match: the whole table, at every check, for a stream with nothing past T
// (TestStreamChecksProbeTheRecordsKeyWhateverTheStatistics). A first row in key order is never
// cheaper by a scan and a sort than by the key.
const expectStreamQuery = `SELECT foldstream_expect_stream(EXISTS (SELECT 1 FROM streams s WHERE s.id = $1
	AND s.content_type = $2 AND s.state = $3 AND s.ttl_seconds IS NOT DISTINCT FROM $4::bigint
	AND s.expires_at_ms IS NOT DISTINCT FROM $5::bigint AND s.closed = $6
	AND s.closed_by_producer IS NOT DISTINCT FROM $7::text AND s.closed_by_epoch IS NOT DISTINCT FROM $8::bigint
	AND s.closed_by_seq IS NOT DISTINCT FROM $9::bigint AND s.forked_from IS NOT DISTINCT FROM $10::bigint
	AND s.fork_offset = $11 AND s.fork_sub_offset = $12 AND s.tail = $13
	AND s.stream_seq IS NOT DISTINCT FROM $14::text AND s.incarnation = $15 AND s.paused IS NOT DISTINCT FROM $16::text
	AND s.tail <= $17 AND (SELECT true FROM records r WHERE r.stream_id = s.id AND r.end_pos > $17 ORDER BY r.end_pos LIMIT 1) IS NULL
	AND (s.tail = $17 OR (SELECT r.end_pos FROM records r WHERE r.stream_id = s.id AND r.end_pos >= $17 ORDER BY r.end_pos LIMIT 1) = $17)
	AND ` + highestExpr + ` <= $18), $1)`

// forgetRow drops the prefetched row of stream id: the transaction is writing to the stream.
func (t *writeTx) forgetRow(id int64) {
	for p, r := range t.prefetched {
		if r.ID == id {
			delete(t.prefetched, p)
		}
	}
}

// StreamByID answers from the row StreamByPath just read under the stream's lock when nothing
// ran since; otherwise it reads the row.
func (t *writeTx) StreamByID(ctx context.Context, id int64) (driver.Stream, error) {
	if t.p != nil && t.fresh.ID == id && id != 0 && t.freshOps == t.p.ops {
		r := t.fresh
		t.fresh = driver.Stream{}
		return r, nil
	}
	return t.readTx.StreamByID(ctx, id)
}

func hashPath(path string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(path))
	return h.Sum32()
}

func (t *readTx) streamByPath(ctx context.Context, path string) (driver.Stream, error) {
	r, err := scanStream(t.tx.QueryRow(ctx, `SELECT `+streamCols+` FROM streams s WHERE s.path = $1`, path))
	if isNoRows(err) {
		return driver.Stream{}, driver.ErrNoStream
	}
	if err != nil {
		return driver.Stream{}, t.d.classify(fmt.Errorf("load stream %q: %w", path, err))
	}
	return r, nil
}

func (t *readTx) StreamByID(ctx context.Context, id int64) (driver.Stream, error) {
	r, err := scanStream(t.tx.QueryRow(ctx, `SELECT `+streamCols+` FROM streams s WHERE s.id = $1`, id))
	if isNoRows(err) {
		return driver.Stream{}, driver.ErrNoStream
	}
	if err != nil {
		return driver.Stream{}, t.d.classify(fmt.Errorf("load stream %d: %w", id, err))
	}
	return r, nil
}

func (t *readTx) streams(ctx context.Context, what, query string, args ...any) ([]driver.Stream, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("%s: %w", what, err))
	}
	defer rows.Close()
	var out []driver.Stream
	for rows.Next() {
		r, err := scanStream(rows)
		if err != nil {
			return nil, t.d.classify(fmt.Errorf("%s: %w", what, err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("%s: %w", what, err))
	}
	return out, nil
}

func (t *readTx) ChildStreams(ctx context.Context, id int64) ([]driver.Stream, error) {
	return t.streams(ctx, "load forks", `SELECT `+streamCols+` FROM streams s WHERE s.forked_from = $1 ORDER BY s.id`, id)
}

func (t *readTx) ListStreams(ctx context.Context, lq driver.ListQuery) ([]driver.Stream, error) {
	q := `SELECT ` + streamCols + ` FROM streams s WHERE s.state = 0 AND s.path > $1`
	if lq.Inclusive {
		q = `SELECT ` + streamCols + ` FROM streams s WHERE s.state = 0 AND s.path >= $1`
	}
	args := []any{lq.From}
	if lq.Below != "" {
		q += ` AND s.path < $2`
		args = append(args, lq.Below)
	}
	args = append(args, lq.Limit)
	q += fmt.Sprintf(` ORDER BY s.path LIMIT $%d`, len(args))
	return t.streams(ctx, "list streams", q, args...)
}

func (t *readTx) CountStreams(ctx context.Context) (int, error) {
	var n int
	if err := t.tx.QueryRow(ctx, `SELECT count(*) FROM streams`).Scan(&n); err != nil {
		return 0, t.d.classify(fmt.Errorf("count streams: %w", err))
	}
	return n, nil
}

func (t *readTx) CollectCandidates(ctx context.Context, afterID, nowMs int64, limit int) ([]driver.Stream, error) {
	return t.streams(ctx, "collect expired streams", `SELECT `+streamCols+` FROM streams s WHERE s.id > $1 AND (s.state = 1
		OR s.expires_at_ms <= $2 OR (s.ttl_seconds IS NOT NULL AND s.last_access_ms + s.ttl_seconds * 1000 <= $2))
		ORDER BY s.id LIMIT $3`, afterID, nowMs, limit)
}

// The write side.

type writer struct{ d *Driver }

// Begin starts a READ COMMITTED write transaction on a pooled connection, as a pipeline: BEGIN
// goes to the server with the transaction's first read. Writers of one stream are serialised by
// LockStream, so each sees the other's committed rows after taking the lock.
func (w *writer) Begin(ctx context.Context) (driver.WriteTx, error) {
	p, err := w.d.beginPipeline(ctx)
	if err != nil {
		return nil, w.d.classify(fmt.Errorf("begin: %w", err))
	}
	return &writeTx{readTx: readTx{d: w.d, tx: p}, p: p, held: make(map[lockID]bool)}, nil
}

type writeTx struct {
	readTx
	// p is the transaction's pipeline (nil for a checkpoint write on a plain pgx.Tx).
	p *pipeline
	// notes are the notifications queued so far; spMark is their count when the current
	// savepoint opened, so a rollback to it drops the ones it queued.
	notes  []driver.Notification
	spMark int
	// held are the streams whose lock this transaction holds; takenInSp those of them taken
	// inside the current savepoint (since it opened or was last rolled back to), which a rollback
	// to it releases. Kept apart rather than as a copy of held at each savepoint, which cost a
	// group of n writes n copies of up to n locks.
	held      map[lockID]bool
	takenInSp []lockID
	// usedInSp are the stream locks the current write function (the one inside the open
	// savepoint) asked for with LockStream: it
	// relies on rows read under them, so split may not release them (see split).
	usedInSp map[lockID]bool
	// epoch counts the splits, each of which released every lock (driver.LockKeeper).
	epoch int
	// onEarly is called after each split's commit (OnEarlyCommit).
	onEarly func()
	// fresh is the stream row StreamByPath read under the stream's lock, valid while the
	// pipeline's ops still equal freshOps (nothing ran since).
	fresh    driver.Stream
	freshOps int
	// prefetched are the stream rows PrefetchStreams read under their locks, by path, until the
	// transaction writes to the stream or releases its locks.
	prefetched map[string]driver.Stream
	// wroteInSp reports that the current savepoint changed something.
	wroteInSp bool
	inSp      bool
}

func (t *writeTx) exec(ctx context.Context, what, query string, args ...any) error {
	t.wroteInSp = true
	if _, err := t.tx.Exec(ctx, query, args...); err != nil {
		return t.d.classify(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

func (t *writeTx) Savepoint(ctx context.Context) error {
	if err := t.p.savepoint(); err != nil {
		return t.d.classify(fmt.Errorf("savepoint: %w", err))
	}
	t.spMark = len(t.notes)
	t.takenInSp = t.takenInSp[:0]
	clear(t.usedInSp)
	t.wroteInSp, t.inSp = false, true
	return nil
}

func (t *writeTx) RollbackToSavepoint(ctx context.Context) error {
	if err := t.p.rollbackToSavepoint(ctx); err != nil {
		return t.d.classify(fmt.Errorf("roll back to savepoint: %w", err))
	}
	t.notes = t.notes[:t.spMark]
	// Locks taken inside a rolled-back subtransaction are released with it.
	for _, k := range t.takenInSp {
		delete(t.held, k)
	}
	t.takenInSp = t.takenInSp[:0]
	clear(t.usedInSp)
	t.wroteInSp = false
	return nil
}

func (t *writeTx) ReleaseSavepoint(ctx context.Context) error {
	if err := t.p.endSavepoint("RELEASE SAVEPOINT w"); err != nil {
		return t.d.classify(fmt.Errorf("release savepoint: %w", err))
	}
	clear(t.usedInSp)
	t.inSp = false
	return nil
}

// Commit sends the queued notifications (delivered by PostgreSQL only if the commit succeeds)
// and commits, with every statement still queued, in one round trip. synchronous_commit stays
// on: the commit is flushed before it returns.
func (t *writeTx) Commit(ctx context.Context) error {
	if err := t.sendNotes(ctx); err != nil {
		return err
	}
	if err := t.p.commit(ctx); err != nil {
		return t.d.classify(fmt.Errorf("commit: %w", err))
	}
	return nil
}

func (t *writeTx) Rollback(ctx context.Context) error {
	return t.p.rollback(ctx)
}

// LockStream takes the stream's transaction-scoped advisory lock (Message DB's per-stream
// writer lock). A group transaction may lock several streams; waiting for a second lock while
// holding a first could deadlock with another node's group that locked them the other way round,
// so a lock that is not free at once is handled by splitDeadlock.
func (t *writeTx) LockStream(ctx context.Context, id int64) error {
	if err := t.lock(ctx, t.d.lockCls, int32(id)); err != nil {
		return err
	}
	if t.inSp {
		if t.usedInSp == nil {
			t.usedInSp = make(map[lockID]bool)
		}
		t.usedInSp[lockID{t.d.lockCls, int32(id)}] = true
	}
	return nil
}

// LockEpoch counts the splits so far (see split): each released every lock the transaction held.
func (t *writeTx) LockEpoch() int { return t.epoch }

// OnEarlyCommit has fn called right after each split's commit succeeded (driver.EarlyCommitWatcher).
func (t *writeTx) OnEarlyCommit(fn func()) { t.onEarly = fn }

// lock takes the advisory lock (cls, key) until the transaction ends.
func (t *writeTx) lock(ctx context.Context, cls, key int32) error {
	k := lockID{cls, key}
	if t.held[k] {
		return nil
	}
	if len(t.held) > 0 {
		var ok bool
		if err := t.tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, $2)`, cls, key).Scan(&ok); err != nil {
			return t.d.classify(fmt.Errorf("lock stream: %w", err))
		}
		if ok {
			t.take(k)
			return nil
		}
		if err := t.split(ctx); err != nil {
			return err
		}
	}
	if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, cls, key); err != nil {
		return t.d.classify(fmt.Errorf("lock stream: %w", err))
	}
	t.take(k)
	return nil
}

// take counts the lock k, just taken where the transaction stands now, as held: inside the
// current savepoint when one is open, so that a rollback to it releases k again.
func (t *writeTx) take(k lockID) {
	if t.held[k] {
		return
	}
	t.held[k] = true
	if t.inSp {
		t.takenInSp = append(t.takenInSp, k)
	}
}

// lockID names an advisory lock: a class (per schema and purpose) and a key.
type lockID struct{ cls, key int32 }

// split commits the work of the group's earlier (successful) functions and continues in a new
// transaction that holds no locks, so this function can wait for its stream without any risk of
// a deadlock. It is only possible while the current function has changed nothing and relies on
// no stream lock (it locked none with LockStream: a row it read under a lock would be stale once
// the lock is released, and another node could append at the offsets it is about to use);
// otherwise the function waits holding its locks, and PostgreSQL's deadlock detector ends a cycle
// by failing one function (which the store reports as a retryable error). The store compares
// LockEpoch before it reuses a row an earlier function of the group read.
//
// The early commit is final: the epoch moves on the moment it succeeded, so the store counts the
// earlier functions as committed (driver.LockKeeper) even when what follows — a new connection,
// the rest of the group, the last commit — fails.
func (t *writeTx) split(ctx context.Context) error {
	if t.wroteInSp || len(t.usedInSp) > 0 {
		return nil
	}
	inSp := t.inSp
	if inSp {
		if err := t.p.endSavepoint("RELEASE SAVEPOINT w"); err != nil {
			return t.d.classify(fmt.Errorf("release savepoint: %w", err))
		}
	}
	if err := t.sendNotes(ctx); err != nil {
		return err
	}
	if err := t.p.commit(ctx); err != nil {
		return t.d.classify(fmt.Errorf("commit: %w", err))
	}
	t.epoch++
	if t.onEarly != nil {
		t.onEarly()
	}
	t.notes = t.notes[:0]
	t.spMark = 0
	t.held = make(map[lockID]bool)
	t.takenInSp = t.takenInSp[:0]
	// A row read under a released lock is stale (and the new pipeline's op count means nothing
	// for it).
	t.fresh, t.freshOps = driver.Stream{}, 0
	t.prefetched = nil
	p, err := t.d.beginPipeline(ctx)
	if err != nil {
		// The committed pipeline has no connection any more: every later statement of the group
		// fails with this error.
		err = t.d.classify(fmt.Errorf("begin: %w", err))
		t.p.failed = err
		return err
	}
	t.p, t.tx = p, p
	if inSp {
		if err := t.p.savepoint(); err != nil {
			return t.d.classify(fmt.Errorf("savepoint: %w", err))
		}
	}
	return nil
}

func (t *writeTx) InsertStream(ctx context.Context, s driver.Stream) (int64, error) {
	t.wroteInSp = true
	var id int64
	err := t.tx.QueryRow(ctx, `INSERT INTO streams(path, content_type, state, created_ms, ttl_seconds, expires_at_ms,
		last_access_ms, closed, forked_from, fork_offset, fork_sub_offset, tail, incarnation)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id`,
		s.Path, s.ContentType, s.State, s.CreatedMs, s.TTLSeconds, s.ExpiresAtMs, s.LastAccessMs, s.Closed,
		s.ForkedFrom, s.ForkOffset, s.ForkSubOffset, s.BaseTail, s.Incarnation).Scan(&id)
	if err != nil {
		return 0, t.d.classify(fmt.Errorf("create stream: %w", err))
	}
	return id, nil
}

func (t *writeTx) UpdateStream(ctx context.Context, id int64, u driver.StreamUpdate) error {
	t.forgetRow(id)
	var sets []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if u.LastAccessMs != nil {
		sets = append(sets, `last_access_ms = greatest(last_access_ms, `+arg(*u.LastAccessMs)+`)`)
	}
	if u.StreamSeq != nil {
		sets = append(sets, `stream_seq = `+arg(*u.StreamSeq))
	}
	if c := u.Close; c != nil {
		var by *string
		var epoch, seq *int64
		if c.Producer != "" {
			by, epoch, seq = &c.Producer, &c.Epoch, &c.Seq
		}
		sets = append(sets, `closed = true, closed_by_producer = `+arg(by)+`, closed_by_epoch = `+arg(epoch)+`, closed_by_seq = `+arg(seq))
	}
	if u.State != nil {
		sets = append(sets, `state = `+arg(*u.State))
	}
	if u.Incarnation != nil {
		sets = append(sets, `incarnation = `+arg(*u.Incarnation))
	}
	if u.Paused != nil {
		sets = append(sets, `paused = `+arg(*u.Paused))
	}
	if u.Highest != nil {
		// The unlogged sequence of handed-out offsets (ephemerals included), and its logged
		// reserve, moved a block ahead only when the sequence reaches it (docs/postgres.md#ephemeral-events).
		// One statement, which writes to no logged table otherwise (nor locks a row: an UPDATE
		// whose condition fails locks nothing, where ON CONFLICT DO UPDATE would), so an ephemeral
		// batch waits for no WAL flush but once per block.
		if err := t.exec(ctx, "record the highest offset", `WITH head AS (
				INSERT INTO stream_heads(stream_id, highest) VALUES ($1, $2)
				ON CONFLICT (stream_id) DO UPDATE SET highest = greatest(stream_heads.highest, excluded.highest)),
			bumped AS (
				UPDATE stream_reserves SET reserved = $2::int8 + $3 WHERE stream_id = $1 AND reserved < $2::int8)
			INSERT INTO stream_reserves(stream_id, reserved) SELECT $1, $2::int8 + $3
			WHERE NOT EXISTS (SELECT 1 FROM stream_reserves WHERE stream_id = $1)
			ON CONFLICT (stream_id) DO NOTHING`, id, *u.Highest, int64(ReserveBlock)); err != nil {
			return err
		}
	}
	if len(sets) == 0 {
		return nil
	}
	return t.exec(ctx, "update stream", `UPDATE streams SET `+strings.Join(sets, ", ")+` WHERE id = `+arg(id), args...)
}

func (t *writeTx) DeleteStream(ctx context.Context, id int64) error {
	t.forgetRow(id)
	for _, q := range []string{
		`DELETE FROM records WHERE stream_id = $1`,
		`DELETE FROM record_keys WHERE stream_id = $1`,
		`DELETE FROM producers WHERE stream_id = $1`,
		`DELETE FROM stream_heads WHERE stream_id = $1`,
		`DELETE FROM stream_reserves WHERE stream_id = $1`,
		`DELETE FROM streams WHERE id = $1`,
	} {
		if err := t.exec(ctx, "delete stream", q, id); err != nil {
			return err
		}
	}
	return nil
}

func (t *writeTx) DeleteProcessorState(ctx context.Context, path string) error {
	for _, q := range []string{
		`DELETE FROM reduce_checkpoints WHERE scope = $1`,
		`DELETE FROM claims WHERE path = $1`,
		`DELETE FROM processor_states WHERE path = $1`,
		`DELETE FROM processor_parked WHERE path = $1`,
	} {
		if err := t.exec(ctx, "delete processor state", q, path); err != nil {
			return err
		}
	}
	return nil
}

func (t *writeTx) InsertRecord(ctx context.Context, r driver.Record) error {
	t.forgetRow(r.StreamID)
	var frames []byte
	if r.Frames != nil {
		frames = r.Frames
	}
	body := r.Body
	if body == nil {
		body = []byte{}
	}
	if len(r.Keys) == 0 {
		return t.exec(ctx, "append", insertRecordSQL, r.StreamID, r.RecordStart, r.Start, r.End, r.CreatedMs, frames, body)
	}
	// The record and its keys in one round trip.
	keys := make([]string, len(r.Keys))
	offs := make([]int64, len(r.Keys))
	for i, k := range r.Keys {
		keys[i], offs[i] = k.Key, k.Offset
	}
	return t.exec(ctx, "append", `WITH rec AS (
			INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body)
			VALUES ($1, $2, $3, $4, $5, $6, $7))
		INSERT INTO record_keys(stream_id, key, "offset") SELECT $1, k, o FROM unnest($8::text[], $9::bigint[]) AS u(k, o)`,
		r.StreamID, r.RecordStart, r.Start, r.End, r.CreatedMs, frames, body, keys, offs)
}

func (t *writeTx) PutProducer(ctx context.Context, streamID int64, p driver.Producer) error {
	return t.exec(ctx, "save producer state", `INSERT INTO producers(stream_id, producer_id, epoch, last_seq, updated_ms) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (stream_id, producer_id) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq, updated_ms = excluded.updated_ms`,
		streamID, p.ID, p.Epoch, p.LastSeq, p.UpdatedMs)
}

func (t *writeTx) PutClaim(ctx context.Context, c driver.Claim) error {
	return t.exec(ctx, "save claim", `INSERT INTO claims(path, slug, at_ms, failures) VALUES ($1, $2, $3, $4)
		ON CONFLICT (path, slug) DO UPDATE SET at_ms = excluded.at_ms, failures = excluded.failures`,
		c.Path, c.Slug, c.AtMs, c.Failures)
}

func (t *writeTx) DeleteClaim(ctx context.Context, c driver.Claim, exact bool) error {
	if exact {
		return t.exec(ctx, "delete claim", `DELETE FROM claims WHERE path = $1 AND slug = $2 AND at_ms = $3 AND failures = $4`,
			c.Path, c.Slug, c.AtMs, c.Failures)
	}
	return t.exec(ctx, "delete claim", `DELETE FROM claims WHERE path = $1 AND slug = $2`, c.Path, c.Slug)
}

// WriteCheckpoint upserts the checkpoint. With a fence it first checks the lease (checkFence): a
// node taking the lease over waits for this transaction, or this transaction sees a generation
// that moved on and writes nothing (LEASE_LOST).
func (t *writeTx) WriteCheckpoint(ctx context.Context, w driver.CheckpointWrite) error {
	if err := t.checkFence(ctx, w.Fence, fmt.Sprintf("write checkpoint %q", w.Slug)); err != nil {
		return err
	}
	var state *string
	if w.StateChanged && w.Checkpoint.State != nil {
		s := string(w.Checkpoint.State)
		state = &s
	}
	if err := t.exec(ctx, fmt.Sprintf("write checkpoint %q", w.Slug), `INSERT INTO reduce_checkpoints (scope, slug, reducer_version, reduced_through_offset, state)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope, slug) DO UPDATE SET
		  reducer_version = excluded.reducer_version,
		  reduced_through_offset = excluded.reduced_through_offset,
		  state = COALESCE(excluded.state, reduce_checkpoints.state)`,
		w.Scope, w.Slug, w.Checkpoint.ReducerVersion, w.Checkpoint.ReducedThroughOffset, state); err != nil {
		return err
	}
	for _, slug := range w.Remove {
		if err := t.exec(ctx, fmt.Sprintf("write checkpoint %q: delete %q", w.Slug, slug),
			`DELETE FROM reduce_checkpoints WHERE scope = $1 AND slug = $2`, w.Scope, slug); err != nil {
			return err
		}
	}
	return nil
}

// CheckFence is checkFence, for the store's fenced appends.
func (t *writeTx) CheckFence(ctx context.Context, f *driver.Fence, what string) error {
	return t.checkFence(ctx, f, what)
}

// checkFence fails with LEASE_LOST when f is set and its lease is no longer held at its
// generation. It reads the lease row FOR KEY SHARE until the transaction ends: a node taking the
// lease over changes the row's generation, a key column (the unique index leases_key_generation),
// so it waits for this transaction, and this transaction sees a generation that moved on; the
// holder's renewals change only the expiry and status and are not held up, however long the
// write's group takes to commit (docs/postgres.md#processors-and-leases).
func (t *writeTx) checkFence(ctx context.Context, f *driver.Fence, what string) error {
	if f == nil {
		return nil
	}
	var gen int64
	err := t.tx.QueryRow(ctx, `SELECT generation FROM leases WHERE key = $1 FOR KEY SHARE`, f.Key).Scan(&gen)
	if err != nil && !isNoRows(err) {
		return t.d.classify(fmt.Errorf("%s: check lease: %w", what, err))
	}
	if isNoRows(err) || gen != f.Generation {
		return leaseLost(what, f)
	}
	return nil
}

func leaseLost(what string, f *driver.Fence) error {
	e := foldtype.NewError(foldtype.CodeLeaseLost, map[string]any{"lease": f.Key, "generation": f.Generation},
		"%s: lease %q is no longer held at generation %d; nothing was written", what, f.Key, f.Generation)
	e.Retryable = false
	return e
}

// Notify queues n; Commit sends the queued notifications in the transaction, so they are
// delivered exactly when it commits.
func (t *writeTx) Notify(ctx context.Context, n driver.Notification) error {
	t.notes = append(t.notes, n)
	return nil
}

// Exec runs a raw statement in the transaction (tests and tools; the store never does).
func (t *writeTx) Exec(ctx context.Context, query string, args ...any) error {
	t.prefetched = nil
	return t.exec(ctx, "exec", query, args...)
}
