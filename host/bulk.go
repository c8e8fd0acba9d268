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
	// wouldChange reports, for each of paths (matched streams of one page, processor slug
	// registered on each), whether the verb would change the processor there now. It reads what
	// it needs of the store in one read for the whole page, not one per stream.
	wouldChange func(ctx context.Context, slug string, paths []string) ([]bool, error)
	// do runs the verb on one stream.
	do func(ctx context.Context, path string) error
}

// PauseMatching pauses processor slug on every stream pattern matches ([Host.Pause] each, with
// reason), or with dryRun only counts the streams it would pause. Streams where it is paused
// already are matched but not changed.
func (h *Host) PauseMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: func(ctx context.Context, slug string, paths []string) ([]bool, error) {
			paused, err := h.pausedForBulk(ctx, slug, paths)
			for i := range paused {
				paused[i] = !paused[i]
			}
			return paused, err
		},
		do: func(ctx context.Context, path string) error { return h.Pause(ctx, path, slug, reason) },
	})
}

// ResumeMatching resumes processor slug on every stream pattern matches where it is paused, or
// with dryRun only counts them.
func (h *Host) ResumeMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: h.pausedForBulk,
		do:          func(ctx context.Context, path string) error { return h.Resume(ctx, path, slug) },
	})
}

// RetryMatching makes processor slug's next attempt run now ([Host.RetryNow]) on every stream
// pattern matches where it is failing, or with dryRun only counts them. Streams where it is not
// failing (paused ones too) are matched but not changed.
func (h *Host) RetryMatching(ctx context.Context, pattern, slug string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: h.failingForBulk,
		do:          func(ctx context.Context, path string) error { return h.RetryNow(ctx, path, slug) },
	})
}

// SkipMatching moves processor slug past the event it fails on ([Host.Skip], with reason) on
// every stream pattern matches where it is failing, or with dryRun only counts them. Each
// skipped event is parked as a single Skip parks it.
func (h *Host) SkipMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (BulkResult, error) {
	return h.bulk(ctx, pattern, slug, dryRun, bulkVerb{
		wouldChange: h.failingForBulk,
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

// pausedForBulk reports, for each of paths, whether slug is paused there, as its stored state
// row says: the rows of all of paths in one read (stateRowsOf).
func (h *Host) pausedForBulk(ctx context.Context, slug string, paths []string) ([]bool, error) {
	rows, err := h.stateRowsOf(ctx, slug, paths)
	if err != nil {
		return nil, err
	}
	paused := make([]bool, len(paths))
	for i, path := range paths {
		r, ok := rows[path]
		paused[i] = ok && r.State == rowPaused
	}
	return paused, nil
}

// failingForBulk reports, for each of paths, whether slug is failing there: this node's engine
// says so where it runs the processor (the stored row follows it in the background), the stored
// state row elsewhere — the rows of all those paths in one read (stateRowsOf).
func (h *Host) failingForBulk(ctx context.Context, slug string, paths []string) ([]bool, error) {
	failing := make([]bool, len(paths))
	var stored []int // indexes of paths whose stored row decides
	h.mu.Lock()
	for i, path := range paths {
		if sl := h.slots[procKey{path, slug}]; sl != nil && sl.state == slotOpen {
			failing[i] = sl.failing != nil && sl.paused == nil
		} else {
			stored = append(stored, i)
		}
	}
	h.mu.Unlock()
	if len(stored) == 0 {
		return failing, nil
	}
	read := make([]string, len(stored))
	for j, i := range stored {
		read[j] = paths[i]
	}
	rows, err := h.stateRowsOf(ctx, slug, read)
	if err != nil {
		return nil, err
	}
	for _, i := range stored {
		r, ok := rows[paths[i]]
		failing[i] = ok && r.State == rowFailing
	}
	return failing, nil
}

// unswitchedForBulk reports, for each of paths, whether slug's registration there has a next
// version its checkpoint row does not hold yet: the rows of all those paths in one read.
func (h *Host) unswitchedForBulk(ctx context.Context, slug string, paths []string) ([]bool, error) {
	next := make([]string, len(paths)) // the next version registered on each path ("": none)
	var read []string
	h.mu.Lock()
	for i, path := range paths {
		if reg := h.registrationFor(path, slug); reg != nil {
			if n := reg.next.Load(); n != nil {
				next[i] = n.version
				read = append(read, path)
			}
		}
	}
	h.mu.Unlock()
	unswitched := make([]bool, len(paths))
	if len(read) == 0 {
		return unswitched, nil
	}
	cps, err := h.store.Events().CheckpointsOfSlug(ctx, slug, read)
	if err != nil {
		return nil, err
	}
	for i, path := range paths {
		if next[i] == "" {
			continue
		}
		cp, ok := cps[path]
		unswitched[i] = !ok || cp.ReducerVersion != next[i]
	}
	return unswitched, nil
}

// bulk walks the streams pattern matches, a page at a time in path order, and runs v on those
// where slug is registered and v would change it. Whether v would change a page's streams is
// read once for the page, before v runs on any of them.
func (h *Host) bulk(ctx context.Context, pattern, slug string, dryRun bool, v bulkVerb) (BulkResult, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return BulkResult{}, foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"pattern": pattern}, "host: %v", err)
	}
	res := BulkResult{DryRun: dryRun}
	opts := stream.ListOptions{Prefix: p.Prefix(), Limit: stream.MaxListLimit}
	if h.bulkPage > 0 {
		opts.Limit = h.bulkPage
	}
	walked := 0
	for {
		page, err := h.store.Events().ListStreams(ctx, opts)
		if err != nil {
			return res, err
		}
		var matched []string
		h.mu.Lock()
		for _, info := range page {
			walked++
			if !p.Match(info.Path) {
				continue
			}
			if reg := h.registrationFor(info.Path, slug); reg != nil && reg.added == nil {
				matched = append(matched, info.Path)
			}
		}
		h.mu.Unlock()
		res.Matched += len(matched)
		var change []bool
		if len(matched) > 0 {
			if change, err = v.wouldChange(ctx, slug, matched); err != nil {
				return res, err
			}
		}
		for i, path := range matched {
			if !change[i] {
				continue
			}
			if dryRun {
				res.Changed++
				continue
			}
			if err := v.do(ctx, path); err != nil {
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
