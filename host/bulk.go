package host

import (
	"context"
	"errors"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Bulk verbs (docs/operations.md#bulk-verbs): one verb on processor slug of every stream a path
// pattern matches, with a dry run that counts what it would touch. Every bulk verb is the same
// walk (bulk) with two parts of its own: whether the verb would change the processor on one
// stream, and doing it there.

// maxBulkStreams bounds the streams one bulk verb walks.
const maxBulkStreams = 100_000

// BulkResult is the outcome of a bulk verb.
type BulkResult = foldtype.BulkResult

// bulkVerb is one verb as a bulk walk runs it.
type bulkVerb struct {
	// wouldChange reports whether the verb would change processor key (registered on its stream,
	// info) now; the others are matched, not changed.
	wouldChange func(ctx context.Context, key procKey, info stream.StreamInfo) (bool, error)
	// do runs the verb on one stream.
	do func(ctx context.Context, path string) error
}

// PauseMatching pauses processor slug on every stream pattern matches ([Host.Pause] each, with
// reason), or with dryRun only counts the streams it would pause. Streams where it is paused
// already are matched but not changed.
func (h *Host) PauseMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: func(ctx context.Context, key procKey, _ stream.StreamInfo) (bool, error) {
			paused, err := h.pausedForBulk(ctx, key)
			return !paused, err
		},
		do: func(ctx context.Context, path string) error { return h.Pause(ctx, path, slug, reason) },
	})
}

// ResumeMatching resumes processor slug on every stream pattern matches where it is paused, or
// with dryRun only counts them.
func (h *Host) ResumeMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: func(ctx context.Context, key procKey, _ stream.StreamInfo) (bool, error) {
			return h.pausedForBulk(ctx, key)
		},
		do: func(ctx context.Context, path string) error { return h.Resume(ctx, path, slug) },
	})
}

// RetryMatching makes processor slug's next attempt run now ([Host.RetryNow]) on every stream
// pattern matches where it is failing, or with dryRun only counts them. Streams where it is not
// failing (paused ones too) are matched but not changed.
func (h *Host) RetryMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: func(ctx context.Context, key procKey, _ stream.StreamInfo) (bool, error) {
			return h.failingForBulk(ctx, key)
		},
		do: func(ctx context.Context, path string) error { return h.RetryNow(ctx, path, slug) },
	})
}

// SkipMatching moves processor slug past the event it fails on ([Host.Skip], with reason) on
// every stream pattern matches where it is failing, or with dryRun only counts them. Each
// skipped event is parked as a single Skip parks it.
func (h *Host) SkipMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: func(ctx context.Context, key procKey, _ stream.StreamInfo) (bool, error) {
			return h.failingForBulk(ctx, key)
		},
		do: func(ctx context.Context, path string) error {
			_, err := h.Skip(ctx, path, slug, reason)
			return err
		},
	})
}

// RebuildMatching starts the rebuild of processor slug's next version ([Host.Rebuild]) on every
// stream pattern matches where a next version is registered and the processor has not switched
// to it, or with dryRun only counts them. A rebuild running already is counted and left running.
func (h *Host) RebuildMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: h.unswitchedForBulk,
		do: func(ctx context.Context, path string) error {
			_, err := h.Rebuild(ctx, path, slug)
			return err
		},
	})
}

// pausedForBulk reports whether key is paused, as its stored state row says.
func (h *Host) pausedForBulk(ctx context.Context, key procKey) (bool, error) {
	r, ok, err := h.stateRow(ctx, key)
	return ok && r.State == rowPaused, err
}

// failingForBulk reports whether key is failing: this node's engine says so when it runs key
// (the stored row follows it in the background), the stored state row otherwise.
func (h *Host) failingForBulk(ctx context.Context, key procKey) (bool, error) {
	h.mu.Lock()
	if sl := h.slots[key]; sl != nil && sl.state == slotOpen {
		failing := sl.failing != nil && sl.paused == nil
		h.mu.Unlock()
		return failing, nil
	}
	h.mu.Unlock()
	r, ok, err := h.stateRow(ctx, key)
	return ok && r.State == rowFailing, err
}

// unswitchedForBulk reports whether key's registration has a next version its checkpoint row
// does not hold yet.
func (h *Host) unswitchedForBulk(ctx context.Context, key procKey, info stream.StreamInfo) (bool, error) {
	h.mu.Lock()
	reg := h.registrationFor(key.path, key.slug)
	h.mu.Unlock()
	if reg == nil {
		return false, nil
	}
	n := reg.next.Load()
	if n == nil {
		return false, nil
	}
	cps, err := h.checkpointsOf(key.path, info)
	if err != nil {
		return false, err
	}
	cp, ok, err := cps.ReadCheckpoint(ctx, key.slug)
	if err != nil {
		return false, err
	}
	return !ok || cp.ReducerVersion != n.version, nil
}

// bulk walks the streams pattern matches, in path order, and runs v on those where slug is
// registered and v would change it.
func (h *Host) bulk(ctx context.Context, pattern, slug string, dryRun bool, v bulkVerb) (BulkResult, error) {
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
			change, err := v.wouldChange(ctx, procKey{info.Path, slug}, info)
			if err != nil {
				return res, err
			}
			if !change {
				continue
			}
			if dryRun {
				res.Changed++
				continue
			}
			if err := v.do(ctx, info.Path); err != nil {
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
