package host

import (
	"context"
	"errors"
	"sort"

	"github.com/foldstream/foldstream"
)

// ProcessorsOn returns the status of every processor the host runs on the stream at path: the
// exact-path registrations on it and, when the stream exists, the pattern registrations covering
// it — open or not, parked or not — sorted by slug. It opens no engine: a closed one reports its
// stored checkpoint's offset. It returns nil on a host that is shut down.
func (h *Host) ProcessorsOn(ctx context.Context, path string) []foldstream.ProcessorStatus {
	type entry struct {
		reg *registration
		sl  *slot
	}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return nil
	}
	var entries []entry
	hasPattern := false
	for key, reg := range h.exact {
		if key.path == path {
			entries = append(entries, entry{reg, h.slots[key]})
		}
	}
	for _, reg := range h.patterns {
		if reg.pattern.Match(path) && h.exact[procKey{path, reg.slug}] == nil {
			entries = append(entries, entry{reg, h.slots[procKey{path, reg.slug}]})
			hasPattern = true
		}
	}
	out := make([]foldstream.ProcessorStatus, 0, len(entries))
	var closed []int
	for _, e := range entries {
		st := foldstream.ProcessorStatus{Slug: e.reg.slug, Version: e.reg.version, Pattern: e.reg.pattern.String()}
		switch {
		case e.sl != nil && e.sl.state == slotOpen:
			st.Open = true
			st.Offset = e.sl.runner.ReducedThroughOffset()
			if l, ok := e.sl.runner.(interface{ LiveState() *foldstream.LiveState }); ok {
				st.LiveRev = l.LiveState().Snapshot().Rev
			}
		case e.sl != nil && e.sl.state == slotParked:
			var pe *foldstream.Error
			if errors.As(e.sl.parked, &pe) {
				st.Parked, st.ParkedMessage = pe, pe.Message
			}
			closed = append(closed, len(out))
		default:
			closed = append(closed, len(out))
		}
		out = append(out, st)
	}
	h.mu.Unlock()
	if hasPattern {
		if _, err := h.store.HeadStream(ctx, path); err != nil {
			// Patterns cover existing streams only.
			kept := out[:0]
			for _, st := range out {
				if h.exactHas(path, st.Slug) {
					kept = append(kept, st)
				}
			}
			out, closed = kept, nil
			for i := range out {
				if !out[i].Open {
					closed = append(closed, i)
				}
			}
		}
	}
	if len(closed) > 0 {
		if cps, err := h.checkpoints(path); err == nil {
			for _, i := range closed {
				if cp, ok, err := cps.ReadCheckpoint(ctx, out[i].Slug); err == nil && ok {
					out[i].Offset = cp.ReducedThroughOffset
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}

func (h *Host) exactHas(path, slug string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.exact[procKey{path, slug}] != nil
}
