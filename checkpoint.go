package foldstream

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/foldstream/foldstream/foldtype"
)

// CheckpointDB is what the table needs of its database: *sql.DB, *sql.Tx and *sql.Conn satisfy it, and so
// does a wrapper that routes the writes through the program's own single writer.
type CheckpointDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CheckpointTableConfig configures [NewCheckpointTable].
type CheckpointTableConfig struct {
	// Table is the table name. Defaults to "reduce_checkpoints".
	Table string
	// Scope partitions rows so one SQLite file can hold many streams' checkpoints (scope by
	// stream path, for example). Defaults to "".
	Scope string
	// SkipCreate skips CREATE TABLE IF NOT EXISTS, for a table that already exists.
	SkipCreate bool
}

// CheckpointTable is the reduce_checkpoints table over a database/sql database the caller owns
// (docs/engine.md#checkpoints), a [foldtype.CheckpointStorage] for [EngineConfig.Checkpoints]: for a
// program that runs an [Engine] itself (not on the store, whose host keeps checkpoints in the
// store's own database) and wants its checkpoints beside its other data, for example in the same
// SQLite file. It is written for SQLite
// (modernc.org/sqlite; the statements use "?" placeholders and ON CONFLICT upserts).
//
// The primary key is (scope, slug) rather than slug alone, because one
// foldstream SQLite file holds many streams:
//
//	reduce_checkpoints(scope TEXT NOT NULL DEFAULT '', slug TEXT NOT NULL,
//	  reducer_version TEXT NOT NULL, reduced_through_offset INTEGER NOT NULL, state TEXT,
//	  PRIMARY KEY (scope, slug))
type CheckpointTable struct {
	db     CheckpointDB
	scope  string
	read   string
	write  string
	remove string
}

var _ foldtype.CheckpointStorage = (*CheckpointTable)(nil)

var checkpointTableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// NewCheckpointTable returns the table, creating it unless cfg.SkipCreate. It fails when cfg.Table is not a plain
// SQL identifier or the table cannot be created.
func NewCheckpointTable(ctx context.Context, db CheckpointDB, cfg CheckpointTableConfig) (*CheckpointTable, error) {
	table := cfg.Table
	if table == "" {
		table = "reduce_checkpoints"
	}
	if !checkpointTableName.MatchString(table) {
		return nil, fmt.Errorf("checkpoint table: invalid table name %q", table)
	}
	if !cfg.SkipCreate {
		_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
  scope TEXT NOT NULL DEFAULT '',
  slug TEXT NOT NULL,
  reducer_version TEXT NOT NULL,
  reduced_through_offset INTEGER NOT NULL,
  state TEXT,
  PRIMARY KEY (scope, slug)
)`)
		if err != nil {
			return nil, fmt.Errorf("create checkpoint table: %w", err)
		}
	}
	return &CheckpointTable{
		db:    db,
		scope: cfg.Scope,
		read:  `SELECT reducer_version, reduced_through_offset, state FROM ` + table + ` WHERE scope = ? AND slug = ?`,
		write: `INSERT INTO ` + table + ` (scope, slug, reducer_version, reduced_through_offset, state)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (scope, slug) DO UPDATE SET
  reducer_version = excluded.reducer_version,
  reduced_through_offset = excluded.reduced_through_offset,
  state = COALESCE(excluded.state, ` + table + `.state)`,
		remove: `DELETE FROM ` + table + ` WHERE scope = ? AND slug = ?`,
	}, nil
}

// ReadCheckpoint reads slug's row; an empty or NULL state column reads as nil.
func (t *CheckpointTable) ReadCheckpoint(ctx context.Context, slug string) (foldtype.Checkpoint, bool, error) {
	var cp foldtype.Checkpoint
	var state sql.NullString
	err := t.db.QueryRowContext(ctx, t.read, t.scope, slug).Scan(&cp.ReducerVersion, &cp.ReducedThroughOffset, &state)
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

// WriteCheckpoint upserts slug's row in one statement (docs/engine.md#checkpoints). With
// stateChanged the state column is set; otherwise NULL is passed and COALESCE keeps the stored
// state. A state over [foldtype.MaxCheckpointChars] UTF-16 code units is refused before anything is written
// ([foldtype.CheckpointTooLargeError], not retryable).
func (t *CheckpointTable) WriteCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	var state any
	if stateChanged && cp.State != nil {
		if n := foldtype.UTF16Len(string(cp.State)); n > foldtype.MaxCheckpointChars {
			return foldtype.CheckpointTooLargeError(slug, n)
		}
		state = string(cp.State)
	}
	if _, err := t.db.ExecContext(ctx, t.write, t.scope, slug, cp.ReducerVersion, cp.ReducedThroughOffset, state); err != nil {
		return fmt.Errorf("write checkpoint %q: %w", slug, err)
	}
	return nil
}

var _ CheckpointSwitcher = (*CheckpointTable)(nil)

// SwitchCheckpoint writes slug's row as cp and deletes row remove, in one transaction when the
// database is a *sql.DB (a rebuild's switch, docs/operations.md#rebuild-beside-the-running-version);
// over a *sql.Tx or *sql.Conn the two statements run in the caller's transaction, if any.
func (t *CheckpointTable) SwitchCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, remove string) error {
	if n := foldtype.UTF16Len(string(cp.State)); n > foldtype.MaxCheckpointChars {
		return foldtype.CheckpointTooLargeError(slug, n)
	}
	db, tx := t.db, (*sql.Tx)(nil)
	if b, ok := t.db.(*sql.DB); ok {
		var err error
		if tx, err = b.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("switch checkpoint %q: %w", slug, err)
		}
		defer func() { _ = tx.Rollback() }()
		db = tx
	}
	var state any
	if cp.State != nil {
		state = string(cp.State)
	}
	if _, err := db.ExecContext(ctx, t.write, t.scope, slug, cp.ReducerVersion, cp.ReducedThroughOffset, state); err != nil {
		return fmt.Errorf("switch checkpoint %q: %w", slug, err)
	}
	if _, err := db.ExecContext(ctx, t.remove, t.scope, remove); err != nil {
		return fmt.Errorf("switch checkpoint %q: delete %q: %w", slug, remove, err)
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("switch checkpoint %q: %w", slug, err)
		}
	}
	return nil
}
