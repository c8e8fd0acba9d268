package kernel

import (
	"context"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// The statements of driver.Tx the event face writes with, on a write function's lazy transaction
// (lazytx.go): claims, checkpoints, fences and the processor state a deleted stream takes with
// it. The kernel forwards them as it forwards every statement, and runs none of them itself.

func (l lazyTx) Claims(ctx context.Context) ([]driver.Claim, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.Claims(ctx)
}

func (l lazyTx) DueClaims(ctx context.Context, nowMs int64) ([]driver.Claim, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.DueClaims(ctx, nowMs)
}

func (l lazyTx) NextClaimAt(ctx context.Context) (int64, bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return 0, false, err
	}
	return d.NextClaimAt(ctx)
}

func (l lazyTx) Checkpoint(ctx context.Context, scope, slug string) (foldtype.Checkpoint, bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return foldtype.Checkpoint{}, false, err
	}
	return d.Checkpoint(ctx, scope, slug)
}

func (l lazyTx) CheckpointsOfSlug(ctx context.Context, slug string, scopes []string, fn func(scope string, cp foldtype.Checkpoint)) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.CheckpointsOfSlug(ctx, slug, scopes, fn)
}

// CheckpointRows is driver.ReadCheckpointRows on the group's transaction.
func (l lazyTx) CheckpointRows(ctx context.Context, scope string, slugs []string, fn func(slug string, cp foldtype.Checkpoint)) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return driver.ReadCheckpointRows(ctx, d, scope, slugs, fn)
}

func (l lazyTx) DeleteProcessorState(ctx context.Context, path string) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.DeleteProcessorState(ctx, path)
}

func (l lazyTx) PutClaim(ctx context.Context, c driver.Claim) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.PutClaim(ctx, c)
}

func (l lazyTx) DeleteClaim(ctx context.Context, c driver.Claim, exact bool) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.DeleteClaim(ctx, c, exact)
}

func (l lazyTx) WriteCheckpoint(ctx context.Context, w driver.CheckpointWrite) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.WriteCheckpoint(ctx, w)
}

func (l lazyTx) CheckFence(ctx context.Context, f *driver.Fence, what string) error {
	if f == nil {
		return nil
	}
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.CheckFence(ctx, f, what)
}
