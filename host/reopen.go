package host

import (
	"context"
	"sync"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
)

// Reopening an engine (docs/store.md#engines-of-a-pattern) reads what it needs in as few reads of
// the database as it can: on an exclusive database the stream's row with the engine's checkpoint
// and work-started marker in one read; on a shared one the stream's row before the lease and the
// two checkpoint rows together under it; then the events after the checkpoint in its catch-up.

// preloadedRows are checkpoint rows read together for one engine being built: each is answered
// once, then forgotten (a write forgets it at once), so the engine sees every later change.
type preloadedRows struct {
	mu   sync.Mutex
	rows map[string]preloadedRow
}

type preloadedRow struct {
	cp    foldtype.Checkpoint
	found bool
}

// engineRows are the checkpoint rows an engine of processor slug reads when it is built: its
// checkpoint and its work-started marker.
func engineRows(slug string) []string {
	return []string{slug, foldstream.WorkStartedRow(slug)}
}

// preloaded holds the rows of slugs as read (a slug missing from read: no row).
func preloaded(read map[string]foldtype.Checkpoint, slugs []string) *preloadedRows {
	r := &preloadedRows{rows: make(map[string]preloadedRow, len(slugs))}
	for _, slug := range slugs {
		cp, ok := read[slug]
		r.rows[slug] = preloadedRow{cp: cp, found: ok}
	}
	return r
}

// take returns slug's preloaded row and forgets it.
func (r *preloadedRows) take(slug string) (preloadedRow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[slug]
	delete(r.rows, slug)
	return row, ok
}

func (r *preloadedRows) forget(slug string) {
	r.mu.Lock()
	delete(r.rows, slug)
	r.mu.Unlock()
}

// forgetAll forgets every row not taken yet: once the engine is built, its reads go to the store.
func (r *preloadedRows) forgetAll() {
	r.mu.Lock()
	clear(r.rows)
	r.mu.Unlock()
}

// preloadedCheckpoints is a checkpoint storage whose reads answer from rows first.
type preloadedCheckpoints struct {
	foldtype.CheckpointStorage
	rows *preloadedRows
}

func (p preloadedCheckpoints) ReadCheckpoint(ctx context.Context, slug string) (foldtype.Checkpoint, bool, error) {
	if row, ok := p.rows.take(slug); ok {
		return row.cp, row.found, nil
	}
	return p.CheckpointStorage.ReadCheckpoint(ctx, slug)
}

func (p preloadedCheckpoints) WriteCheckpoint(ctx context.Context, slug string, cp foldtype.Checkpoint, stateChanged bool) error {
	p.rows.forget(slug)
	return p.CheckpointStorage.WriteCheckpoint(ctx, slug, cp, stateChanged)
}
