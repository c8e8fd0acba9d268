package testsupport

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Checkpoints is the real [foldstream.CheckpointTable] over an in-memory SQLite database, counting
// successful writes (docs/engine.md#test-support memoryStorage).
type Checkpoints struct {
	*foldstream.CheckpointTable
	db     *sql.DB
	writes atomic.Int64
}

var _ foldtype.CheckpointStorage = (*Checkpoints)(nil)

// MemoryCheckpoints returns fresh, empty checkpoint storage. It panics if in-memory SQLite cannot
// be opened, which only a broken build can cause. Close it when done (optional in tests).
func MemoryCheckpoints() *Checkpoints {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		panic(fmt.Sprintf("testsupport: open in-memory sqlite: %v", err))
	}
	db.SetMaxOpenConns(1) // one connection = one in-memory database
	t, err := foldstream.NewCheckpointTable(context.Background(), db, foldstream.CheckpointTableConfig{})
	if err != nil {
		panic(fmt.Sprintf("testsupport: create checkpoint table: %v", err))
	}
	return &Checkpoints{CheckpointTable: t, db: db}
}

// WriteCheckpoint writes through the table and counts the write when it succeeded.
func (c *Checkpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	if err := c.CheckpointTable.WriteCheckpoint(ctx, slug, cp, stateChanged); err != nil {
		return err
	}
	c.writes.Add(1)
	return nil
}

// Writes returns the number of successful writes.
func (c *Checkpoints) Writes() int { return int(c.writes.Load()) }

// Get reads slug's row, failing the caller's expectations loudly: ok is false when there is none.
func (c *Checkpoints) Get(slug string) (foldtype.Checkpoint, bool) {
	cp, ok, err := c.ReadCheckpoint(context.Background(), slug)
	if err != nil {
		panic(err)
	}
	return cp, ok
}

// DB returns the underlying database.
func (c *Checkpoints) DB() *sql.DB { return c.db }

// Close closes the database.
func (c *Checkpoints) Close() error { return c.db.Close() }
