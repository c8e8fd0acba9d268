package stream

import (
	"sort"

	"github.com/foldstream/foldstream/foldtype"
)

// EphemeralRingBytes bounds the per-stream ring of recent ephemeral events that reads with
// readOptions.IncludeEphemeral merge in (docs/store.md#appending: 1 MiB, oldest dropped first; an
// ephemeral larger than the bound is kept alone).
const EphemeralRingBytes = 1 << 20

// ephemeralRing holds one stream's recent ephemerals in offset order. It lives in memory only: a new
// incarnation starts empty, and its offsets above the durable mark may be handed out again.
type ephemeralRing struct {
	events []foldtype.Event
	bytes  int
}

// rememberEphemerals adds a landed batch's ephemerals to the stream's ring. Called after commit.
func (s *Store) rememberEphemerals(streamID int64, evs []foldtype.Event) {
	s.ev.ringMu.Lock()
	defer s.ev.ringMu.Unlock()
	r := s.ev.rings[streamID]
	if r == nil {
		r = &ephemeralRing{}
		s.ev.rings[streamID] = r
	}
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
