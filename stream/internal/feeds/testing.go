package feeds

import "github.com/foldstream/foldstream/foldtype"

// What the store's own tests (package stream's) look into a hub through. They are functions, not
// methods, so that stream.Subscription and the event face offer the store's callers none of them.

// RingSnapshot returns a copy of the ephemeral ring of the stream with id streamID.
func RingSnapshot(h *Hub, streamID int64) []foldtype.Event { return h.ringSnapshot(streamID) }

// RingAccount is what the ephemeral rings hold, read under their lock: Held rings in the map,
// Listed in the recency list, Bytes their bytes summed ring by ring, Accounted the running total
// the bound is kept on, and Rings each held ring's bytes by stream id.
type RingAccount struct {
	Held, Listed, Bytes, Accounted int
	Rings                          map[int64]int
}

// Rings returns what h's ephemeral rings hold.
func Rings(h *Hub) RingAccount {
	h.ringMu.Lock()
	defer h.ringMu.Unlock()
	a := RingAccount{Held: len(h.rings), Listed: h.ringLRU.Len(), Accounted: h.ringTotal, Rings: map[int64]int{}}
	for id, r := range h.rings {
		a.Bytes += r.bytes
		a.Rings[id] = r.bytes
	}
	return a
}

// HasFeed reports whether h keeps a feed for path.
func HasFeed(h *Hub, path string) bool { return h.feedOf(path) != nil }

// KickFeed asks path's feed to catch up from the database, as a notification does.
func KickFeed(h *Hub, path string) { h.kickFeed(path) }

// FeedRunning reports whether path's feed runs its catch-up goroutine.
func FeedRunning(h *Hub, path string) bool {
	f := h.feedOf(path)
	if f == nil {
		return false
	}
	f.kickMu.Lock()
	defer f.kickMu.Unlock()
	return f.running
}
