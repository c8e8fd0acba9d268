package host

import (
	"context"
	"errors"

	"github.com/foldstream/foldstream/stream"
)

// errSettledIdle ends a takeover's slot that settled its processor idle instead of opening it
// (settleCaughtUp): a read waiting for that slot opens the engine itself.
var errSettledIdle = errors.New("host: processor settled idle; no engine opened")

// settleCaughtUp settles a pattern processor this node takes over (its lease was released for a
// takeover by a node that stopped or handed it over, or ran out) as idle when its checkpoint
// covers its stream: it takes the lease and releases it idle, so no node takes the processor over
// again until the stream changes, and opens no engine — so it writes nothing, no wake record
// (docs/store.md#records-nobody-appended): a clean restart of a node leaves its caught-up
// streams as they were. It reports false, having done nothing the caller must undo, when the
// processor has work or its state could not be read: the caller opens the engine as for any
// takeover. A commit on the stream while it settles marks the slot dirty, and the caller then
// opens the engine too, so no commit is left unprocessed.
func (h *Host) settleCaughtUp(sl *slot) bool {
	h.mu.Lock()
	sl.settling, sl.dirty = true, false
	h.mu.Unlock()
	unsettle := func() bool {
		h.mu.Lock()
		sl.settling, sl.dirty = false, false
		h.mu.Unlock()
		return false
	}
	info, behind, err := h.behindHead(h.ctx, sl.reg, sl.key.path)
	if err != nil {
		return unsettle()
	}
	if behind {
		// The opening reads the stream's head before the lease as this read did: it takes this
		// one instead of a round trip of its own.
		sl.head = &info
		return unsettle()
	}
	l, err := h.leases.acquire(h.ctx, sl.key, true)
	if err != nil {
		return unsettle() // another node holds it, or the database failed: opening decides
	}
	h.leases.release(sl.key, l.Generation, true)
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.dirty {
		sl.settling, sl.dirty = false, false
		return false // a commit arrived meanwhile: open the engine for it
	}
	sl.settling = false
	sl.openErr = errSettledIdle
	if h.slots[sl.key] == sl {
		delete(h.slots, sl.key)
	}
	close(sl.ready)
	return true
}

// behindHead is behind for a takeover's settle check, in one read of the database instead of two:
// the stream's row and the processor's checkpoint together (a hand-over on a busy machine waits
// for each round trip, docs/postgres.md#graceful-hand-over). The processor is behind when its
// contract version changed or the stream's tail lies after its checkpoint — exactly when behind's
// read of the events after the checkpoint finds one, as the tail is the offset of the stream's last
// record. It returns the stream as read.
func (h *Host) behindHead(ctx context.Context, reg *registration, path string) (stream.StreamInfo, bool, error) {
	o, err := h.store.Events().ReadOpening(ctx, stream.OpeningRequest{Path: path, Slugs: []string{reg.slug}})
	if err != nil {
		return stream.StreamInfo{}, false, err
	}
	info := o.Info
	cp, ok := o.Checkpoints[reg.slug]
	if ok && reg.version != "" && cp.ReducerVersion != reg.version {
		return info, true, nil // a re-reduce is due
	}
	return info, info.Tail > cp.ReducedThroughOffset, nil
}
