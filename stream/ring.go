package stream

import (
	"container/list"
	"sort"

	"github.com/foldstream/foldstream/foldtype"
)

// EphemeralRingBytes bounds the per-stream ring of recent ephemeral events that reads with
// readOptions.IncludeEphemeral merge in (docs/store.md#appending: 1 MiB, oldest dropped first; an
// ephemeral larger than the bound is kept alone).
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
	elem   *list.Element // in eventView.ringLRU, most recently appended first
}

// ringTotal bounds what the rings of all streams hold together (Config.MaxEphemeralBytes): once
// the total passes max, whole rings of the streams whose last ephemeral is oldest are dropped, so
// a store with many streams keeps the rings of the recently active ones. A dropped ring is the
// state a new incarnation starts in: reads merge no ephemerals for that stream until it gets new
// ones (docs/store.md#appending). ringMu held.
func (v *eventView) trimRingsLocked(keep *ephemeralRing) {
	for v.ringTotal > v.ringMax {
		e := v.ringLRU.Back()
		if e == nil {
			return
		}
		r := e.Value.(*ephemeralRing)
		if r == keep {
			return // the ring just appended to stays, bounded by EphemeralRingBytes itself
		}
		v.dropRingLocked(r)
	}
}

// dropRingLocked forgets a stream's ring. ringMu held.
func (v *eventView) dropRingLocked(r *ephemeralRing) {
	v.ringLRU.Remove(r.elem)
	v.ringTotal -= r.bytes
	delete(v.rings, r.id)
}

// forgetRing drops a stream's ring (its incarnation ended).
func (s *Store) forgetRing(streamID int64) {
	s.ev.ringMu.Lock()
	defer s.ev.ringMu.Unlock()
	if r := s.ev.rings[streamID]; r != nil {
		s.ev.dropRingLocked(r)
	}
}

// rememberEphemerals adds a landed batch's ephemerals to the stream's ring. Called after commit.
func (s *Store) rememberEphemerals(streamID int64, evs []foldtype.Event) {
	s.ev.ringMu.Lock()
	defer s.ev.ringMu.Unlock()
	v := s.ev
	r := v.rings[streamID]
	if r == nil {
		r = &ephemeralRing{id: streamID}
		r.elem = v.ringLRU.PushFront(r)
		v.rings[streamID] = r
	} else {
		v.ringLRU.MoveToFront(r.elem)
	}
	before := r.bytes
	for _, ev := range evs {
		r.events = append(r.events, ev)
		r.bytes += eventBytes(ev)
		for len(r.events) > 1 && r.bytes > EphemeralRingBytes {
			r.bytes -= eventBytes(r.events[0])
			r.events[0] = foldtype.Event{}
			r.events = r.events[1:]
		}
	}
	// Compact once the dropped prefix dominates the backing array.
	if cap(r.events) > 64 && len(r.events) < cap(r.events)/4 {
		r.events = append([]foldtype.Event(nil), r.events...)
	}
	v.ringTotal += r.bytes - before
	v.trimRingsLocked(r)
}

// ringSnapshot returns a copy of the stream's ring.
func (s *Store) ringSnapshot(streamID int64) []foldtype.Event {
	s.ev.ringMu.Lock()
	defer s.ev.ringMu.Unlock()
	r := s.ev.rings[streamID]
	if r == nil {
		return nil
	}
	return append([]foldtype.Event(nil), r.events...)
}

// mergeEphemerals merges ring ephemerals into a read page: those in (after, scanned], and on an
// at-head page also those beyond scanned.
func (s *Store) mergeEphemerals(streamID int64, page []foldtype.Event, after, scanned int64, atHead bool) []foldtype.Event {
	ring := s.ringSnapshot(streamID)
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
