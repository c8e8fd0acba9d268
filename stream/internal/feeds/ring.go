package feeds

import (
	"container/list"
	"sort"

	"github.com/foldstream/foldstream/foldtype"
)

// EphemeralRingBytes bounds the per-stream ring of recent ephemeral events that reads including
// ephemerals merge in (docs/store.md#appending: 1 MiB, oldest dropped first; an ephemeral larger
// than the bound is kept alone).
const EphemeralRingBytes = 1 << 20

// DefaultMaxEphemeralBytes is the default of Config.MaxEphemeralBytes: what all streams' rings
// hold together.
const DefaultMaxEphemeralBytes = 64 << 20

// ephemeralRing holds one stream's recent ephemerals in offset order. It lives in memory only: a new
// incarnation starts empty, and its offsets above the durable mark may be handed out again.
type ephemeralRing struct {
	id     int64
	events []foldtype.Event
	bytes  int
	elem   *list.Element // in Hub.ringLRU, most recently appended first
}

// ringTotal bounds what the rings of all streams hold together (Config.MaxEphemeralBytes): once
// the total passes max, whole rings of the streams whose last ephemeral is oldest are dropped, so
// a store with many streams keeps the rings of the recently active ones. A dropped ring is the
// state a new incarnation starts in: reads merge no ephemerals for that stream until it gets new
// ones (docs/store.md#appending). ringMu held.
func (h *Hub) trimRingsLocked(keep *ephemeralRing) {
	for h.ringTotal > h.ringMax {
		e := h.ringLRU.Back()
		if e == nil {
			return
		}
		r := e.Value.(*ephemeralRing)
		if r == keep {
			return // the ring just appended to stays, bounded by EphemeralRingBytes itself
		}
		h.dropRingLocked(r)
	}
}

// dropRingLocked forgets a stream's ring. ringMu held.
func (h *Hub) dropRingLocked(r *ephemeralRing) {
	h.ringLRU.Remove(r.elem)
	h.ringTotal -= r.bytes
	delete(h.rings, r.id)
}

// ForgetRing drops a stream's ring (its incarnation ended).
func (h *Hub) ForgetRing(streamID int64) {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	if r := h.rings[streamID]; r != nil {
		h.dropRingLocked(r)
	}
}

// RememberEphemerals adds a landed batch's ephemerals to the stream's ring. Called after commit.
func (h *Hub) RememberEphemerals(streamID int64, evs []foldtype.Event) {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	r := h.rings[streamID]
	if r == nil {
		r = &ephemeralRing{id: streamID}
		r.elem = h.ringLRU.PushFront(r)
		h.rings[streamID] = r
	} else {
		h.ringLRU.MoveToFront(r.elem)
	}
	before := r.bytes
	for _, ev := range evs {
		r.events = append(r.events, ev)
		r.bytes += EventBytes(ev)
		for len(r.events) > 1 && r.bytes > EphemeralRingBytes {
			r.bytes -= EventBytes(r.events[0])
			r.events[0] = foldtype.Event{}
			r.events = r.events[1:]
		}
	}
	// Compact once the dropped prefix dominates the backing array.
	if cap(r.events) > 64 && len(r.events) < cap(r.events)/4 {
		r.events = append([]foldtype.Event(nil), r.events...)
	}
	h.ringTotal += r.bytes - before
	h.trimRingsLocked(r)
}

// ringSnapshot returns a copy of the stream's ring.
func (h *Hub) ringSnapshot(streamID int64) []foldtype.Event {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	r := h.rings[streamID]
	if r == nil {
		return nil
	}
	return append([]foldtype.Event(nil), r.events...)
}

// MergeEphemerals merges ring ephemerals into a read page: those in (after, scanned], and on an
// at-head page also those beyond scanned.
func (h *Hub) MergeEphemerals(streamID int64, page []foldtype.Event, after, scanned int64, atHead bool) []foldtype.Event {
	ring := h.ringSnapshot(streamID)
	added := false
	for _, ev := range ring {
		if ev.Offset <= after || (!atHead && ev.Offset > scanned) {
			continue
		}
		page = append(page, ev)
		added = true
	}
	if added {
		sort.SliceStable(page, func(i, j int) bool { return page[i].Offset < page[j].Offset })
	}
	return page
}
