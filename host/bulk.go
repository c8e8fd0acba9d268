package host

import (
	"context"
	"errors"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Bulk verbs (docs/operations.md#bulk-verbs): one verb on processor slug of every stream a path
// pattern matches, with a dry run that counts what it would touch.

// maxBulkStreams bounds the streams one bulk verb walks.
const maxBulkStreams = 100_000

// BulkResult is the outcome of a bulk verb.
type BulkResult = foldtype.BulkResult

// PauseMatching pauses processor slug on every stream pattern matches ([Host.Pause] each, with
// reason), or with dryRun only counts the streams it would pause. Streams where it is paused
// already are matched but not changed.
func (h *Host) PauseMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, false, func(ctx context.Context, path string) error {
		return h.Pause(ctx, path, slug, reason)
	})
}

// ResumeMatching resumes processor slug on every stream pattern matches where it is paused, or
// with dryRun only counts them.
func (h *Host) ResumeMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, true, func(ctx context.Context, path string) error {
		return h.Resume(ctx, path, slug)
	})
}

// bulk walks the streams pattern matches, in path order, and runs verb on those where slug is
// registered and paused (wantPaused) or not paused.
func (h *Host) bulk(ctx context.Context, pattern, slug string, dryRun, wantPaused bool, verb func(ctx context.Context, path string) error) (BulkResult, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return BulkResult{}, foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"pattern": pattern}, "host: %v", err)
	}
	res := BulkResult{DryRun: dryRun}
	opts := stream.ListOptions{Prefix: p.Prefix(), Limit: stream.MaxListLimit}
	walked := 0
	for {
		page, err := h.store.Events().ListStreams(ctx, opts)
		if err != nil {
			return res, err
		}
		for _, info := range page {
			walked++
			if !p.Match(info.Path) {
				continue
			}
			h.mu.Lock()
			reg := h.registrationFor(info.Path, slug)
			h.mu.Unlock()
			if reg == nil || reg.added != nil {
				continue
			}
			res.Matched++
			r, ok, err := h.stateRow(ctx, procKey{info.Path, slug})
			if err != nil {
				return res, err
			}
			if paused := ok && r.State == rowPaused; paused != wantPaused {
				continue
			}
			if dryRun {
				res.Changed++
				continue
			}
			if err := verb(ctx, info.Path); err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrShutdown) {
					return res, err
				}
				res.Failed++
				if res.FirstErr == nil {
					res.FirstErr, res.FirstError = err, err.Error()
				}
				continue
			}
			res.Changed++
		}
		if len(page) < opts.Limit || walked >= maxBulkStreams {
			return res, nil
		}
		opts.After = page[len(page)-1].Path
	}
}
