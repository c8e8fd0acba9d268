package host

import (
	"context"
	"sort"

	"github.com/foldstream/foldstream"
)

// statusReporter is implemented by runners that report their own status (*foldstream.Engine does).
type statusReporter interface {
	Status() foldstream.ProcessorStatus
}

// ProcessorsOn returns the status of every processor the host runs on the stream at path, sorted
// by slug; none (an empty slice) when it runs none there or is shut down. It does not wait for
// pushes or catch-ups: the offsets are where the processors are now.
func (h *Host) ProcessorsOn(ctx context.Context, path string) []foldstream.ProcessorStatus {
	h.mu.Lock()
	runners := make([]foldstream.Runner, 0, 2)
	if !h.shutdown {
		for k, hp := range h.procs {
			if k.path == path && hp.sub != nil {
				runners = append(runners, hp.runner)
			}
		}
	}
	h.mu.Unlock()
	out := make([]foldstream.ProcessorStatus, 0, len(runners))
	for _, r := range runners {
		if sr, ok := r.(statusReporter); ok {
			out = append(out, sr.Status())
			continue
		}
		out = append(out, foldstream.ProcessorStatus{Slug: r.Slug(), Offset: r.ReducedThroughOffset()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}
