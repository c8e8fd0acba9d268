package host

import (
	"context"

	"github.com/foldstream/foldstream/stream"
)

// scan walks the streams that exist when a pattern is registered and queues the engines of those
// behind their checkpoint (new events, a new contract version, or never processed). Streams at
// their checkpoint stay closed until their next commit, read or claim.
func (h *Host) scan(reg *registration) {
	ctx := h.ctx
	after := ""
	for {
		paths, err := h.listStreams(ctx, reg.pattern.Prefix(), after, stream.MaxListLimit)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("host: listing the streams of a pattern failed", "pattern", reg.pattern.String(), "err", err)
			}
			return
		}
		if len(paths) == 0 {
			return
		}
		after = paths[len(paths)-1]
		for _, path := range paths {
			if !reg.pattern.Match(path) {
				continue
			}
			behind, err := h.behind(ctx, reg, path)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				h.log.Warn("host: checking a stream's checkpoint failed", "path", path, "slug", reg.slug, "err", err)
				continue
			}
			if !behind {
				continue
			}
			h.mu.Lock()
			if h.shutdown {
				h.mu.Unlock()
				return
			}
			if h.slots[procKey{path, reg.slug}] == nil {
				h.queueOpenLocked(procKey{path, reg.slug})
			}
			h.mu.Unlock()
		}
	}
}

// behind reports whether processor reg.slug on the stream at path (listed live) has work its
// checkpoint does not cover.
func (h *Host) behind(ctx context.Context, reg *registration, path string) (bool, error) {
	cps, err := h.checkpoints(path)
	if err != nil {
		return false, err
	}
	cp, ok, err := cps.ReadCheckpoint(ctx, reg.slug)
	if err != nil {
		return false, err
	}
	if ok && reg.atVersion(cp.ReducerVersion) == nil {
		return true, nil // a re-reduce is due
	}
	page, err := h.store.Events().Stream(path).Read(ctx, cp.ReducedThroughOffset, 1)
	if err != nil {
		return false, err
	}
	return page.ScannedThroughOffset > cp.ReducedThroughOffset, nil
}

// listStreams returns up to limit live stream paths starting with prefix, after the path after, in
// path order.
func (h *Host) listStreams(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	infos, err := h.store.Events().ListStreams(ctx, stream.ListOptions{Prefix: prefix, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(infos))
	for i, in := range infos {
		paths[i] = in.Path
	}
	return paths, nil
}
