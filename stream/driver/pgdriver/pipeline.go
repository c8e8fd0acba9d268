package pgdriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier runs statements: a pgx.Tx in read transactions (and checkpoint writes), the write
// transaction's pipeline in the store's writes.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pipeline is a write transaction that sends its statements in as few round trips as the store's
// reads allow (docs/postgres.md#writes-round-trips). A statement whose result the store does not
// need — BEGIN, SAVEPOINT, RELEASE, INSERT, UPDATE, the blocking advisory lock, pg_notify — is
// queued and answered nil at once; the queue goes to the server, in order, in one batch with the
// next statement whose result is needed (a SELECT) or with COMMIT. PostgreSQL runs a batch's
// statements one after the other, so every read still sees the writes queued before it.
//
// A queued statement that fails is reported by the flush that sent it. When it was queued after
// the current write function's SAVEPOINT, it belongs to that function, which fails and is rolled
// back to its savepoint as usual. When it was queued before (an earlier function's statement, or
// the SAVEPOINT itself), an earlier function that the store already counts as written would lose
// its write, so the pipeline fails for good: every later statement, the rollback to the
// savepoint and the commit fail with that error, and the whole group is refused — never
// acknowledged without its data.
type pipeline struct {
	d      *Driver
	conn   *pgxpool.Conn
	queue  []queued
	seq    int           // statements queued so far; numbers them
	spSeq  int           // number of the current function's SAVEPOINT (0: no savepoint open)
	failed error         // set when the transaction lost a statement it must not lose
	trips  *atomic.Int64 // counts round trips (the driver's write counter for write transactions)
	ops    int           // statements queued or sent so far, to tell whether anything ran since
	// spIdx is the index in queue of the current function's SAVEPOINT while it is still queued
	// (-1: sent, or none open).
	spIdx int
	// spRolled reports a rollback to the current savepoint since it was opened.
	spRolled bool
	// checks are the StreamExpecter checks queued since the last flush, sent as two statements
	// for all of them at queue index checkAt, which is outside every savepoint (see expect).
	checks  []expectation
	checkAt int
	// timeout bounds each round trip (Config.WriteTimeout; 0: unbounded). A write's deadline
	// covers its round trip's answers to their end; a read's ends at its first answer (read),
	// so a long result is bounded by the connection's keepalives instead.
	timeout time.Duration
	read    bool
}

// expectation is one queued check of ExpectStream.
type expectation struct {
	want    driver.Stream
	highest int64
}

type queued struct {
	sql  string
	args []any
	n    int
}

// beginPipeline acquires a connection and queues the BEGIN of a write transaction.
func (d *Driver) beginPipeline(ctx context.Context) (*pipeline, error) {
	p, err := d.beginPipelineMode(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED")
	if err == nil {
		p.trips = &d.writeRoundTrips
	}
	return p, err
}

// beginPipelineMode acquires a connection, within the write timeout, and queues begin.
func (d *Driver) beginPipelineMode(ctx context.Context, begin string) (*pipeline, error) {
	actx := ctx
	if t := d.cfg.WriteTimeout; t > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	conn, err := d.pool.Acquire(actx)
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			err = fmt.Errorf("no connection to the database within %v: %w", d.cfg.WriteTimeout, err)
		}
		return nil, err
	}
	p := &pipeline{d: d, conn: conn, trips: new(atomic.Int64), spIdx: -1, timeout: d.cfg.WriteTimeout, read: begin == readBegin}
	p.enqueue(begin)
	return p, nil
}

// readBegin begins a read transaction (Driver.Read).
const readBegin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

// arm bounds the round trip about to start: the connection fails when the database has not
// answered within the timeout (pgx then closes it, and the pool replaces it).
func (p *pipeline) arm() {
	if p.timeout > 0 && p.conn != nil {
		_ = p.conn.Conn().PgConn().Conn().SetDeadline(time.Now().Add(p.timeout))
	}
}

// answered lifts a read's deadline once its round trip has its first answer: what follows is a
// result arriving, which no deadline cuts (the keepalives watch it).
func (p *pipeline) answered() {
	if p.read {
		p.disarm()
	}
}

// disarm lifts the deadline.
func (p *pipeline) disarm() {
	if p.timeout > 0 && p.conn != nil {
		_ = p.conn.Conn().PgConn().Conn().SetDeadline(time.Time{})
	}
}

func (p *pipeline) enqueue(sql string, args ...any) int {
	p.ops++
	p.seq++
	p.queue = append(p.queue, queued{sql: sql, args: args, n: p.seq})
	return p.seq
}

// Exec queues the statement; its error, if any, comes with a later flush.
func (p *pipeline) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p.failed != nil {
		return pgconn.CommandTag{}, p.failed
	}
	p.enqueue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// savepoint queues SAVEPOINT w and remembers it as the current function's.
func (p *pipeline) savepoint() error {
	if p.failed != nil {
		return p.failed
	}
	p.spIdx, p.spRolled = len(p.queue), false
	p.spSeq = p.enqueue("SAVEPOINT w")
	return nil
}

// expect queues a check of ExpectStream. Checks queued between two flushes are sent together, as
// two statements (try-lock every stream, then compare every row) at the place of the first,
// before the SAVEPOINT of the function that queued it (or where it was queued, when no savepoint
// was open): outside every savepoint, so no function's rollback releases a lock another relies on,
// and before every statement of the functions that rely on them. It reports false when the
// current function's SAVEPOINT was already sent: the caller then queues the check in place.
//
// A check placed before statements of earlier functions of the group verifies the row as it was
// before them; the store relies on its entry of a stream only while no earlier function of the
// group changed that stream (it then has the stream staged and does not check it).
func (p *pipeline) expect(want driver.Stream, highest int64) bool {
	at := len(p.queue)
	if p.spSeq > 0 {
		if p.spIdx < 0 {
			return false
		}
		at = p.spIdx
	}
	if len(p.checks) == 0 {
		p.checkAt = at
	}
	p.ops++
	p.checks = append(p.checks, expectation{want: want, highest: highest})
	return true
}

// checkStatements are the two statements of the queued checks (see expect). Their number is 0: a
// failure of either fails the whole transaction (they stand outside every savepoint).
func (p *pipeline) checkStatements() []queued {
	n := len(p.checks)
	ids := make([]int64, n)
	cts := make([]string, n)
	states := make([]int64, n)
	ttls := make([]*int64, n)
	expires := make([]*int64, n)
	closed := make([]bool, n)
	byProducer := make([]*string, n)
	byEpoch := make([]*int64, n)
	bySeq := make([]*int64, n)
	forkedFrom := make([]*int64, n)
	forkOffsets := make([]int64, n)
	forkSubs := make([]int64, n)
	baseTails := make([]int64, n)
	seqs := make([]*string, n)
	incarnations := make([]int64, n)
	paused := make([]*string, n)
	tails := make([]int64, n)
	highests := make([]int64, n)
	for i, c := range p.checks {
		w := c.want
		ids[i], cts[i], states[i], closed[i] = w.ID, w.ContentType, int64(w.State), w.Closed
		ttls[i], expires[i] = nullInt(w.TTLSeconds), nullInt(w.ExpiresAtMs)
		byProducer[i], byEpoch[i], bySeq[i] = nullString(w.ClosedByProducer), nullInt(w.ClosedByEpoch), nullInt(w.ClosedBySeq)
		forkedFrom[i], forkOffsets[i], forkSubs[i] = nullInt(w.ForkedFrom), w.ForkOffset, w.ForkSubOffset
		baseTails[i], seqs[i], incarnations[i], paused[i] = w.BaseTail, nullString(w.StreamSeq), w.Incarnation, nullString(w.Paused)
		tails[i], highests[i] = w.Tail, c.highest
	}
	return []queued{
		{sql: expectLocksQuery, args: []any{p.d.lockCls, ids}},
		{sql: expectRowsQuery, args: []any{ids, cts, states, ttls, expires, closed, byProducer, byEpoch, bySeq,
			forkedFrom, forkOffsets, forkSubs, baseTails, seqs, incarnations, paused, tails, highests}},
	}
}

// expectLocksQuery try-locks every checked stream, failing at the first lock not free at once.
const expectLocksQuery = `SELECT foldstream_expect_stream(false, w.id) FROM unnest($2::bigint[]) AS w(id)
	WHERE NOT pg_try_advisory_xact_lock($1::int4, ((w.id << 32) >> 32)::int4)`

// expectRowsQuery compares every checked stream's row (every stored column the store decides on,
// the durable tail, and the highest offset handed out at most the expected one), failing at the
// first that differs. It is a statement of its own after the locks, so that it reads the rows as
// they are under them (READ COMMITTED takes a snapshot per statement).
//
// It walks the ids alone (unnest WITH ORDINALITY) and reads the other columns by subscript:
// unnest over all 18 arrays runs 18 set-returning functions, each materialised apart, which made
// the statement cost PostgreSQL about 1.6 times the CPU it costs now for a dozen streams
// (docs/postgres.md#writes-round-trips).
//
// The durable tail and the highest offset are checked as in expectStreamQuery, without finding the
// last record's end.
const expectRowsQuery = `SELECT foldstream_expect_stream(false, w.id) FROM unnest($1::bigint[]) WITH ORDINALITY AS w(id, i)
	WHERE NOT EXISTS (SELECT 1 FROM streams s WHERE s.id = w.id
		AND s.content_type = ($2::text[])[w.i] AND s.state = ($3::int8[])[w.i]
		AND s.ttl_seconds IS NOT DISTINCT FROM ($4::int8[])[w.i] AND s.expires_at_ms IS NOT DISTINCT FROM ($5::int8[])[w.i]
		AND s.closed = ($6::bool[])[w.i] AND s.closed_by_producer IS NOT DISTINCT FROM ($7::text[])[w.i]
		AND s.closed_by_epoch IS NOT DISTINCT FROM ($8::int8[])[w.i] AND s.closed_by_seq IS NOT DISTINCT FROM ($9::int8[])[w.i]
		AND s.forked_from IS NOT DISTINCT FROM ($10::int8[])[w.i] AND s.fork_offset = ($11::int8[])[w.i]
		AND s.fork_sub_offset = ($12::int8[])[w.i] AND s.tail = ($13::int8[])[w.i]
		AND s.stream_seq IS NOT DISTINCT FROM ($14::text[])[w.i] AND s.incarnation = ($15::int8[])[w.i]
		AND s.paused IS NOT DISTINCT FROM ($16::text[])[w.i]
		AND s.tail <= ($17::int8[])[w.i]
		AND (SELECT true FROM records r WHERE r.stream_id = s.id AND r.end_pos > ($17::int8[])[w.i] ORDER BY r.end_pos LIMIT 1) IS NULL
		AND (s.tail = ($17::int8[])[w.i]
			OR (SELECT r.end_pos FROM records r WHERE r.stream_id = s.id AND r.end_pos >= ($17::int8[])[w.i] ORDER BY r.end_pos LIMIT 1) = ($17::int8[])[w.i])
		AND ` + highestExpr + ` <= ($18::int8[])[w.i])
	LIMIT 1`

func nullInt(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}

func nullString(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

// endSavepoint queues stmt (RELEASE SAVEPOINT w): statements queued from now on belong to no
// function until the next savepoint.
//
// A savepoint whose SAVEPOINT is still queued and that was not rolled back is dropped instead,
// SAVEPOINT and all: its function's statements all go in one batch with the statements after
// them, and PostgreSQL runs a batch only up to its first error, so a statement of the function
// that fails fails the whole transaction with or without the savepoint (the rollback to it would
// be skipped with the rest of the batch); locks it takes are kept either way. That saves two
// statements (and a subtransaction) per write on PostgreSQL's side of the commit's round trip.
func (p *pipeline) endSavepoint(stmt string) error {
	if p.failed != nil {
		return p.failed
	}
	if i := p.spIdx; i >= 0 && !p.spRolled && stmt == "RELEASE SAVEPOINT w" {
		p.queue = append(p.queue[:i], p.queue[i+1:]...)
		if len(p.checks) > 0 && p.checkAt > i {
			p.checkAt--
		}
		p.ops++
	} else {
		p.enqueue(stmt)
	}
	p.spSeq, p.spIdx, p.spRolled = 0, -1, false
	return nil
}

// rollbackToSavepoint queues ROLLBACK TO SAVEPOINT w (the savepoint stays the current one). When
// a statement just failed, the transaction is in the failed state, where PostgreSQL refuses to
// prepare any statement but a rollback; then the rollback is sent at once, so the statements
// queued after it can be prepared with the next flush.
func (p *pipeline) rollbackToSavepoint(ctx context.Context) error {
	if p.failed != nil {
		return p.failed
	}
	if len(p.queue) == 0 && len(p.checks) == 0 && p.conn.Conn().PgConn().TxStatus() == 'E' {
		p.ops++
		p.trips.Add(1)
		p.arm()
		if _, err := p.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT w"); err != nil {
			p.failed = p.d.classify(fmt.Errorf("write transaction: %w", err))
			return p.failed
		}
		return nil
	}
	p.spRolled = true
	p.enqueue("ROLLBACK TO SAVEPOINT w")
	return nil
}

// send sends the queue followed by last (when not empty) in one round trip and reads the queued
// statements' results. It returns the batch's results positioned at last's, to be read and
// closed by the caller; on an error the results are closed.
func (p *pipeline) send(ctx context.Context, last string, args ...any) (pgx.BatchResults, error) {
	if last == "" {
		return p.sendAll(ctx)
	}
	return p.sendAll(ctx, queued{sql: last, args: args})
}

// sendAll sends the queue followed by stmts in one round trip and reads the queued statements'
// results. It returns the batch's results positioned at the first of stmts, to be read and
// closed by the caller; on an error the results are closed.
func (p *pipeline) sendAll(ctx context.Context, stmts ...queued) (pgx.BatchResults, error) {
	if p.failed != nil {
		return nil, p.failed
	}
	p.ops++
	if len(p.checks) > 0 {
		checks := p.checkStatements()
		p.queue = append(p.queue[:p.checkAt:p.checkAt], append(checks, p.queue[p.checkAt:]...)...)
		p.checks = p.checks[:0]
	}
	p.spIdx = -1
	queue := joinRecordInserts(p.queue)
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(queue)+len(stmts))}
	for _, q := range queue {
		b.Queue(q.sql, q.args...)
	}
	for _, q := range stmts {
		b.Queue(q.sql, q.args...)
	}
	p.queue = p.queue[:0:0]
	p.trips.Add(1)
	p.arm()
	br := p.conn.SendBatch(ctx, b)
	for _, q := range queue {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, p.lost(q, err)
		}
	}
	if len(queue) > 0 {
		p.answered()
	}
	return br, nil
}

// insertRecordSQL inserts one record without keys (writeTx.InsertRecord); insertRecordsSQL inserts
// several, one per element of its arrays.
const (
	insertRecordSQL = `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`
	insertRecordsSQL = `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body)
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[], $7::bytea[])`
)

// joinRecordInserts returns queue with every run of two or more consecutive record inserts
// (insertRecordSQL) sent as one statement inserting them all (insertRecordsSQL): a group of plain
// appends queues one per append, back to back (their functions' savepoints are dropped, see
// endSavepoint), and PostgreSQL and pgx each spend a statement's work on every one. The joined
// statement takes the number of the first of its run: a run never spans a SAVEPOINT or ROLLBACK
// TO SAVEPOINT (they stand between), so its statements belong to one function or to none, and its
// failure is that function's (or the transaction's) as the failure of any one of them was; a run
// that fails inserts none of its rows, as the batch would have stopped at the failing one and the
// function or transaction been rolled back. queue itself is left as it is when nothing is joined.
func joinRecordInserts(queue []queued) []queued {
	var out []queued // nil until the first run: queue is then returned as it is
	for i := 0; i < len(queue); {
		j := i + 1
		for queue[i].sql == insertRecordSQL && j < len(queue) && queue[j].sql == insertRecordSQL {
			j++
		}
		switch {
		case j-i >= 2:
			if out == nil {
				out = append(make([]queued, 0, len(queue)), queue[:i]...)
			}
			out = append(out, insertRecords(queue[i:j]))
		case out != nil:
			out = append(out, queue[i])
		}
		i = j
	}
	if out == nil {
		return queue
	}
	return out
}

// insertRecords is the one statement inserting the records of run, a run of insertRecordSQL
// statements, numbered as its first.
func insertRecords(run []queued) queued {
	n := len(run)
	cols := [5][]int64{make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)}
	frames, bodies := make([][]byte, n), make([][]byte, n)
	for k, q := range run {
		for c := range cols {
			cols[c][k] = q.args[c].(int64)
		}
		frames[k], bodies[k] = q.args[5].([]byte), q.args[6].([]byte)
	}
	return queued{sql: insertRecordsSQL, n: run[0].n, args: []any{cols[0], cols[1], cols[2], cols[3], cols[4], frames, bodies}}
}

// lost records the failure of queued statement q: the current function's own (after its
// SAVEPOINT) fails that function; any other fails the transaction for good.
func (p *pipeline) lost(q queued, err error) error {
	err = staleOf(err)
	if p.spSeq > 0 && q.n > p.spSeq {
		return err
	}
	p.failed = p.d.classify(fmt.Errorf("write transaction: a queued statement failed, so the whole group is refused: %w", err))
	return p.failed
}

// staleOf turns the failure of a StreamExpecter check (foldstream_expect_stream) into a
// *driver.StaleStreamError; other errors are returned as they are.
func staleOf(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != staleStreamCode {
		return err
	}
	id, _ := strconv.ParseInt(pgErr.Detail, 10, 64)
	return &driver.StaleStreamError{StreamID: id, Err: err}
}

// staleStreamCode is the SQLSTATE foldstream_expect_stream raises.
const staleStreamCode = "FS001"

// Query sends the queue and the query in one round trip.
func (p *pipeline) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.failed != nil {
		return nil, p.failed
	}
	if len(p.queue) == 0 && len(p.checks) == 0 {
		p.ops++
		p.trips.Add(1)
		p.arm()
		rows, err := p.conn.Query(ctx, sql, args...)
		p.answered()
		return rows, err
	}
	br, err := p.send(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	p.answered()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow sends the queue and the query in one round trip.
func (p *pipeline) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p.failed != nil {
		return errRow{p.failed}
	}
	if len(p.queue) == 0 && len(p.checks) == 0 {
		p.ops++
		p.trips.Add(1)
		p.arm()
		return p.conn.QueryRow(ctx, sql, args...)
	}
	br, err := p.send(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// commit sends the queue with COMMIT in one round trip and releases the connection.
func (p *pipeline) commit(ctx context.Context) error {
	if p.failed != nil {
		return p.failed
	}
	br, err := p.send(ctx, "COMMIT")
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && tag.String() != "COMMIT" {
			// PostgreSQL answers COMMIT of a failed transaction with ROLLBACK.
			err = errors.New("the transaction was rolled back by the database")
		}
	}
	if err != nil {
		if commitUnconfirmed(err) {
			// The COMMIT went out and no answer came: it may have been written or not. The
			// connection is of no further use (what it would answer next is not known), so it
			// is closed; the store forgets what it assumed of the group's streams.
			p.closeConn()
			err = &foldtype.Error{Code: foldtype.CodeCommitOutcomeUnknown, Retryable: true,
				Message: "the database did not confirm the commit in time; the write may or may not be stored: " + err.Error(), Err: err}
			p.failed = err
			return err
		}
		// Whatever the state of the transaction now, none of it may be counted as written.
		if p.failed == nil {
			p.failed = p.d.classify(err)
		}
		return err
	}
	p.release()
	return nil
}

// commitUnconfirmed reports a failure of the COMMIT's round trip that leaves its outcome unknown:
// the connection timed out or broke after the batch may have reached the server. An answer of
// the server (a PostgreSQL error) or a failure before anything was sent is a known outcome.
func commitUnconfirmed(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) {
		return false
	}
	// pgx prepares the batch's statements it has not cached yet in a round trip of their own,
	// before it sends the batch: a failure there sent no COMMIT.
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		return false
	}
	return isUnavailable(err)
}

// closeConn closes the transaction's connection at once (without a goodbye to a server that may
// not answer); the pool drops it when it is released.
func (p *pipeline) closeConn() {
	if p.conn == nil {
		return
	}
	pc := p.conn.Conn().PgConn()
	_ = pc.Conn().Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a closed context: Close marks the connection closed without waiting for the server
	_ = pc.Close(ctx)
}

// rollback abandons the transaction and releases the connection (a connection left inside a
// transaction is closed by the pool rather than reused).
func (p *pipeline) rollback(ctx context.Context) error {
	if p.conn == nil {
		return nil
	}
	p.queue, p.checks = nil, nil
	var err error
	if pc := p.conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		p.arm()
		_, err = p.conn.Exec(ctx, "ROLLBACK")
	}
	p.release()
	return err
}

func (p *pipeline) release() {
	if p.conn != nil {
		p.disarm()
		p.conn.Release()
		p.conn = nil
	}
}

// batchRows closes the batch after its rows.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.br.Close()
}

// batchRow closes the batch after its row.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// ProbeCommit commits a transaction that takes a transaction id and writes nothing, within the
// write timeout (driver.CommitProber): it goes through when a write's COMMIT would.
func (d *Driver) ProbeCommit(ctx context.Context) error {
	p, err := d.beginPipelineMode(ctx, "BEGIN")
	if err != nil {
		return d.classify(fmt.Errorf("probe commit: %w", err))
	}
	defer p.rollback(context.Background()) //nolint:errcheck // after a failed commit only
	p.enqueue("SELECT txid_current()")
	if err := p.commit(ctx); err != nil {
		return d.classify(fmt.Errorf("probe commit: %w", err))
	}
	return nil
}
