package kernel

import (
	"context"

	"github.com/foldstream/foldstream/stream/driver"
)

// lazyTx is the driver.Tx a write function uses: each call first makes sure the group's
// transaction and the function's savepoint exist (tx.begin), so a function that never touches the
// database runs no SQL.
type lazyTx struct{ t *Tx }

var _ driver.Tx = lazyTx{}

// begin makes sure the group's transaction and the function's savepoint exist (tx.begin) and
// returns the context the call's statement runs with (tx.stmtCtx): every call of a write function
// into the database passes here.
func (l lazyTx) begin(ctx context.Context) (driver.WriteTx, context.Context, error) {
	d, err := l.t.Begin()
	return d, l.t.StatementContext(ctx), err
}

func (l lazyTx) StreamByPath(ctx context.Context, path string) (driver.Stream, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return driver.Stream{}, err
	}
	return d.StreamByPath(ctx, path)
}

func (l lazyTx) StreamByID(ctx context.Context, id int64) (driver.Stream, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return driver.Stream{}, err
	}
	return d.StreamByID(ctx, id)
}

func (l lazyTx) ChildStreams(ctx context.Context, id int64) ([]driver.Stream, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.ChildStreams(ctx, id)
}

func (l lazyTx) ListStreams(ctx context.Context, q driver.ListQuery) ([]driver.Stream, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.ListStreams(ctx, q)
}

func (l lazyTx) CountStreams(ctx context.Context) (int, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return 0, err
	}
	return d.CountStreams(ctx)
}

func (l lazyTx) CollectCandidates(ctx context.Context, afterID, nowMs int64, limit int) ([]driver.Stream, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.CollectCandidates(ctx, afterID, nowMs, limit)
}

func (l lazyTx) Records(ctx context.Context, streamID, after int64, fn func(driver.Record) (bool, error)) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.Records(ctx, streamID, after, fn)
}

// RecordsWithin is Records with a budget hint, passed on when the driver's reader takes one
// (driver.SizedRecordsReader).
func (l lazyTx) RecordsWithin(ctx context.Context, streamID, after int64, budget int, fn func(driver.Record) (bool, error)) (bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return false, err
	}
	return recordsWithin(ctx, d, streamID, after, budget, fn)
}

func (l lazyTx) KeyOffset(ctx context.Context, streamID int64, key string) (int64, bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return 0, false, err
	}
	return d.KeyOffset(ctx, streamID, key)
}

func (l lazyTx) Producer(ctx context.Context, streamID int64, id string) (driver.Producer, bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return driver.Producer{}, false, err
	}
	return d.Producer(ctx, streamID, id)
}

func (l lazyTx) LockStream(ctx context.Context, id int64) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.LockStream(ctx, id)
}

func (l lazyTx) InsertStream(ctx context.Context, s driver.Stream) (int64, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return 0, err
	}
	return d.InsertStream(ctx, s)
}

// InsertStreamIfAbsent is InsertStream for a path the writer holds no row of: with a driver that
// can (driver.FreshStreamInserter) one statement that leaves a taken path alone. It reports false,
// having written nothing, when the path is taken or the driver cannot insert only if absent.
func (t *Tx) InsertStreamIfAbsent(s driver.Stream) (int64, bool, error) {
	d, ctx, err := t.db.begin(t.ctx)
	if err != nil {
		return 0, false, err
	}
	f, ok := d.(driver.FreshStreamInserter)
	if !ok {
		return 0, false, nil
	}
	return f.InsertStreamIfAbsent(ctx, s)
}

// InsertStreamAlone is InsertStreamIfAbsent for a create whose insert is the function's only
// statement (no body, no close, no fork): it runs without a savepoint when the function has
// none yet (tx.beginAlone), and without the caller's context, so that a caller going away cannot
// interrupt a statement that has no savepoint to roll back to.
func (t *Tx) InsertStreamAlone(s driver.Stream) (int64, bool, error) {
	d, alone, err := t.beginAlone()
	if err != nil {
		return 0, false, err
	}
	f, ok := d.(driver.FreshStreamInserter)
	if !ok {
		return 0, false, nil
	}
	id, inserted, err := f.InsertStreamIfAbsent(context.Background(), s)
	if err != nil && alone {
		t.aloneErr = err
	}
	return id, inserted, err
}

func (l lazyTx) UpdateStream(ctx context.Context, id int64, u driver.StreamUpdate) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.UpdateStream(ctx, id, u)
}

func (l lazyTx) DeleteStream(ctx context.Context, id int64) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.DeleteStream(ctx, id)
}

func (l lazyTx) InsertRecord(ctx context.Context, r driver.Record) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.InsertRecord(ctx, r)
}

func (l lazyTx) PutProducer(ctx context.Context, streamID int64, p driver.Producer) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.PutProducer(ctx, streamID, p)
}

func (l lazyTx) Notify(ctx context.Context, n driver.Notification) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.Notify(ctx, n)
}
