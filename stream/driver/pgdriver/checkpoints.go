package pgdriver

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// Checkpoints is a processor's checkpoint storage in the reduce_checkpoints table, scoped like
// the store's (by stream path). With a fence, every write checks the lease inside its own
// transaction and fails with LEASE_LOST, writing nothing, once the lease changed hands.
type Checkpoints struct {
	d     *Driver
	scope string
	fence *driver.Fence
}

var _ foldstream.CheckpointStorage = (*Checkpoints)(nil)

// Checkpoints returns the checkpoint storage of scope, fenced by fence when it is not nil.
func (d *Driver) Checkpoints(scope string, fence *driver.Fence) *Checkpoints {
	return &Checkpoints{d: d, scope: scope, fence: fence}
}

// ReadCheckpoint reads slug's row.
func (c *Checkpoints) ReadCheckpoint(ctx context.Context, slug string) (foldstream.Checkpoint, bool, error) {
	return driver.ReadCheckpoint(ctx, c.d.Read, c.scope, slug)
}

// WriteCheckpoint upserts slug's row in its own transaction, checking the fence first. A state
// over foldstream.MaxCheckpointChars is refused before anything is written.
func (c *Checkpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldstream.Checkpoint, stateChanged bool) error {
	if err := driver.CheckCheckpointSize(slug, cp, stateChanged); err != nil {
		return err
	}
	tx, err := c.d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return c.d.classify(fmt.Errorf("write checkpoint %q: %w", slug, err))
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	wt := &writeTx{readTx: readTx{d: c.d, tx: tx}}
	if err := wt.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: c.scope, Slug: slug, Checkpoint: cp,
		StateChanged: stateChanged, Fence: c.fence}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return c.d.classify(fmt.Errorf("write checkpoint %q: commit: %w", slug, err))
	}
	return nil
}
