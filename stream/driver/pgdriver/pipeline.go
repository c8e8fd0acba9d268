package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

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
// reads allow (docs/postgres.md#writes). A statement whose result the store does not need — BEGIN,
// SAVEPOINT, RELEASE, INSERT, UPDATE, the blocking advisory lock, pg_notify — is queued and
// answered nil at once; the queue goes to the server, in order, in one batch with the next
// statement whose result is needed (a SELECT) or with COMMIT. PostgreSQL runs a batch's
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

// beginPipelineMode acquires a connection and queues begin.
func (d *Driver) beginPipelineMode(ctx context.Context, begin string) (*pipeline, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	p := &pipeline{d: d, conn: conn, trips: new(atomic.Int64)}
	p.enqueue(begin)
	return p, nil
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
	p.spSeq = p.enqueue("SAVEPOINT w")
	return nil
}

// endSavepoint queues stmt (RELEASE SAVEPOINT w): statements queued from now on belong to no
// function until the next savepoint.
func (p *pipeline) endSavepoint(stmt string) error {
	if p.failed != nil {
		return p.failed
	}
	p.enqueue(stmt)
	p.spSeq = 0
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
	if len(p.queue) == 0 && p.conn.Conn().PgConn().TxStatus() == 'E' {
		p.ops++
		p.trips.Add(1)
		if _, err := p.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT w"); err != nil {
			p.failed = p.d.classify(fmt.Errorf("write transaction: %w", err))
			return p.failed
		}
		return nil
	}
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
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(p.queue)+len(stmts))}
	for _, q := range p.queue {
		b.Queue(q.sql, q.args...)
	}
	for _, q := range stmts {
		b.Queue(q.sql, q.args...)
	}
	queue := p.queue
	p.queue = p.queue[:0:0]
	p.trips.Add(1)
	br := p.conn.SendBatch(ctx, b)
	for _, q := range queue {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, p.lost(q, err)
		}
	}
	return br, nil
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
	if len(p.queue) == 0 {
		p.ops++
		p.trips.Add(1)
		return p.conn.Query(ctx, sql, args...)
	}
	br, err := p.send(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
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
	if len(p.queue) == 0 {
		p.ops++
		p.trips.Add(1)
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
	if err != nil {
		return err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() != "COMMIT" {
		// PostgreSQL answers COMMIT of a failed transaction with ROLLBACK.
		err = errors.New("the transaction was rolled back by the database")
	}
	if err != nil {
		// Whatever the state of the transaction now, none of it may be counted as written.
		if p.failed == nil {
			p.failed = p.d.classify(err)
		}
		return err
	}
	p.release()
	return nil
}

// rollback abandons the transaction and releases the connection (a connection left inside a
// transaction is closed by the pool rather than reused).
func (p *pipeline) rollback(ctx context.Context) error {
	if p.conn == nil {
		return nil
	}
	p.queue = nil
	var err error
	if p.conn.Conn().PgConn().TxStatus() != 'I' {
		_, err = p.conn.Exec(ctx, "ROLLBACK")
	}
	p.release()
	return err
}

func (p *pipeline) release() {
	if p.conn != nil {
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
