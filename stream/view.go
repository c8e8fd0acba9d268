package stream

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/foldstream/foldstream"
)

// EventStream is the event view of one stream path: the [foldstream.Stream] an engine runs
// against. Bind it to a processor with ForProcessor so Claim knows whose claim it is.
type EventStream struct {
	s    *Store
	path string
	slug string
}

// Stream returns the event view of the stream at path. The stream is created by its first append.
func (s *Store) Stream(path string) *EventStream { return &EventStream{s: s, path: path} }

// ForProcessor returns the view bound to processor slug: its Claim records that processor's claim.
func (e *EventStream) ForProcessor(slug string) *EventStream {
	c := *e
	c.slug = slug
	return &c
}

// Path returns the stream path.
func (e *EventStream) Path() string { return e.path }

// Append appends events to the stream; see [Store.Append].
func (e *EventStream) Append(ctx context.Context, events ...foldstream.EventInput) ([]foldstream.Event, error) {
	return e.s.Append(ctx, e.path, events...)
}

// Read reads durable events; see [Store.Read].
func (e *EventStream) Read(ctx context.Context, after int64, limit int) (foldstream.ReadPage, error) {
	return e.s.Read(ctx, e.path, after, limit, ReadOptions{})
}

// ReadWith reads with options (for example IncludeEphemeral); see [Store.Read].
func (e *EventStream) ReadWith(ctx context.Context, after int64, limit int, opts ReadOptions) (foldstream.ReadPage, error) {
	return e.s.Read(ctx, e.path, after, limit, opts)
}

// Claim records the bound processor's claim (the zero time releases it); see [Store.Claim]. It
// fails on a view not bound with ForProcessor.
func (e *EventStream) Claim(ctx context.Context, at time.Time) error {
	if e.slug == "" {
		return errors.New("claim: the stream view is not bound to a processor (use ForProcessor)")
	}
	return e.s.Claim(ctx, e.path, e.slug, at)
}

var _ foldstream.Stream = (*EventStream)(nil)

// DB is a database handle over the store's file for tables that live beside the streams (such as
// checkpoints): ExecContext goes through the store's single writer (so it never contends with
// appends and shares their group commits), QueryRowContext reads from the read connections, which
// see every write that returned. It satisfies the engine's DBTX interface.
type DB struct{ s *Store }

// DB returns the store's database handle.
func (s *Store) DB() *DB { return &DB{s: s} }

// ExecContext runs one statement in its own savepoint of the writer's next group commit.
func (d *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := d.s.write(ctx, func(tx *Tx) error {
		var err error
		res, err = tx.Exec(query, args...)
		return err
	})
	return res, err
}

// QueryRowContext runs a one-row query on a read connection.
func (d *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if d.s.closed.Load() {
		return d.s.rdb.QueryRowContext(canceledCtx, query, args...)
	}
	return d.s.rdb.QueryRowContext(ctx, query, args...)
}

// Checkpoints returns the checkpoint storage of the processors running on the stream at path: the
// reduce_checkpoints table in the store's own file, scoped by the path, written through the store's
// writer (see [Store.DB]).
func (s *Store) Checkpoints(ctx context.Context, path string) (*foldstream.CheckpointTable, error) {
	return foldstream.NewCheckpointTable(ctx, s.DB(), foldstream.CheckpointTableOptions{Scope: path})
}
