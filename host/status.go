package host

import (
	"context"
	"errors"
	"sort"

	"github.com/foldstream/foldstream/foldtype"
)

// statusReporter is implemented by runners that report their own status (*foldstream.Engine does).
type statusReporter interface {
	Status() foldtype.ProcessorStatus
}

// ProcessorsOn returns the status of every processor the host runs on the stream at path, sorted
// by slug: the exact-path registrations on it and, when the stream exists, the pattern
// registrations covering it — open or closed, parked or not. It neither waits nor opens an engine:
// an open engine reports where it is now, a closed one its stored checkpoint's offset. It returns
// an empty slice when the host runs none there or is shut down.
func (h *Host) ProcessorsOn(ctx context.Context, path string) []foldtype.ProcessorStatus {
	type entry struct {
		reg   *registration
		sl    *slot
		exact bool
	}
	h.mu.Lock()
	var entries []entry
	if !h.shutdown {
		for key, reg := range h.exact {
			if key.path == path {
				entries = append(entries, entry{reg, h.slots[key], true})
			}
		}
		for _, reg := range h.patterns {
			if reg.pattern.Match(path) && h.exact[procKey{path, reg.slug}] == nil {
				entries = append(entries, entry{reg, h.slots[procKey{path, reg.slug}], false})
			}
		}
	}
	out := make([]foldtype.ProcessorStatus, 0, len(entries))
	var closed []int
	patterns := false
	for _, e := range entries {
		st := foldtype.ProcessorStatus{Slug: e.reg.slug, Version: e.reg.version, Pattern: e.reg.pattern.String()}
		switch {
		case e.sl != nil && e.sl.state == slotOpen:
			if sr, ok := e.sl.runner.(statusReporter); ok {
				st = sr.Status()
				st.Pattern = e.reg.pattern.String()
			} else {
				st.Offset = e.sl.runner.ReducedThroughOffset()
			}
			st.Open = true
			if f := e.sl.failing; f != nil {
				cp := *f
				st.Failing, st.State = &cp, foldtype.StateFailing
			}
		case e.sl != nil && e.sl.state == slotParked:
			st.Parked = parkedStatus(e.sl.parked)
			st.State = foldtype.StateParked
			closed = append(closed, len(out))
		default:
			closed = append(closed, len(out))
		}
		if !e.exact {
			patterns = true
		}
		if st.State == "" {
			st.State = foldtype.StateRunning
		}
		out = append(out, st)
	}
	h.mu.Unlock()
	if patterns {
		if _, err := h.store.Events().HeadStream(ctx, path); err != nil {
			// Patterns cover existing streams only: keep the exact registrations.
			var kept []foldtype.ProcessorStatus
			var keptClosed []int
			for i, e := range entries {
				if e.exact {
					if !out[i].Open {
						keptClosed = append(keptClosed, len(kept))
					}
					kept = append(kept, out[i])
				}
			}
			out, closed = append(make([]foldtype.ProcessorStatus, 0, len(kept)), kept...), keptClosed
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
	for i := range out {
		k := procKey{path, out[i].Slug}
		if l, ok := h.leases.owner(k); ok && l.Live {
			out[i].Owner, out[i].Generation, out[i].Local = l.Holder, l.Generation, l.Holder == h.leases.node
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}

// NodeID returns the name this node's leases carry (Config.NodeID or the random default).
func (h *Host) NodeID() string { return h.leases.node }

// parkedStatus is a parked error as a status reports it: the cause's code and message.
func parkedStatus(err error) *foldtype.ProcessorError {
	var pe *foldtype.Error
	if !errors.As(err, &pe) {
		return &foldtype.ProcessorError{Code: foldtype.CodeProcessorParked, Message: err.Error()}
	}
	st := &foldtype.ProcessorError{Code: foldtype.CodeProcessorParked, Message: pe.Message}
	if code := foldtype.CodeOf(pe.Err); code != "" {
		st.Code = code
	}
	if pe.Err != nil {
		st.Message = pe.Err.Error()
	}
	return st
}
