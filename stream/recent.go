package stream

import (
	"slices"

	"github.com/foldstream/foldstream/foldtype"
)

// Recent events (docs/store.md#engines-of-a-pattern).
//
// Over many streams a pattern host opens an engine for nearly every batch that lands: the batch
// commits, the host hears of it, and the engine's opening reads the events after its checkpoint —
// usually that batch and the stream's wake record, which the writer had in hand, decoded, a moment
// before. So on an exclusive database, while a commit watcher is registered (a host runs
// patterns), the writer keeps beside its state of a stream the durable events last appended to
// it through the event view, and Events.HeadStreamForWork answers the opening's page from them
// when they hold every event after the checkpoint: no read of the records, no decoding.
//
// The events live in the stream's streamMem, so they are staged with it and take effect only if
// the write and its group commit. They cover (after, through], where through was the stream's
// tail when they were kept: any other change of the tail (a protocol append, a huge record in
// slices) leaves them behind it, and they are not used until an event append starts them again.
// Each stream keeps at most recentMaxEvents events and recentMaxBytes of stored bodies, and all
// together at most recentTotalBytes (estimated as eventBytes does); past it the streams that
// started keeping theirs longest ago drop them first. Openings queue behind the appends when
// batches land on many streams faster than engines open, so the budget is what decides how deep
// a backlog of openings still finds its events in memory: at 16 MiB, about 10,000 streams whose
// last batch was ten small events.

const (
	// recentOrderSlack is how many stale places the order of recentKept may hold beyond twice the
	// streams keeping events before keptRecent compacts it.
	recentOrderSlack = 64
	recentMaxEvents  = 64
	recentMaxBytes   = 64 << 10
	recentTotalBytes = 16 << 20
)

// recentEvents are a stream's durable events with offsets in (after, through], in offset order.
//
// A value is never changed once kept, but the entries one stream's appends derive from one another
// share the arrays of events and sizes: an append writes only past the length of the entry it
// extends (in place while the array has room, so a stream written over and over copies nothing).
// Two entries derived from the same one both live would overwrite each other's slots; that cannot
// happen, as only the writer touches them and a write derives from the latest entry of the stream
// it sees (its own, its group's, or the committed one): an entry derived and then dropped with a
// failed write is the only one whose slots are written again.
type recentEvents struct {
	after, through int64
	events         []foldtype.Event
	sizes          []int // each event's stored body length
	bytes          int   // the sum of sizes
	mem            int   // the memory the events hold, as recentMem estimates it
}

// recentMem estimates the memory one kept event holds.
func recentMem(ev *foldtype.Event) int { return eventBytes(*ev) + 8 }

// keepsRecent reports whether the writer keeps recent events: only an opening in the writer
// (HeadStreamForWork, exclusive databases) reads them, and only a host watching commits opens
// engines that way.
func (s *Store) keepsRecent() bool { return s.exclusive && s.ev.watchers.registered() }

// keepRecent sets m's recent events after an event append that moved its tail from prevTail to
// m.Tail, writing durable (the batch's new durable events, sizes their stored body lengths).
func keepRecent(m *streamMem, prevTail int64, durable []foldtype.Event, sizes []int) {
	if m.Row.ForkedFrom.Valid || m.Tail <= prevTail || len(durable) == 0 {
		m.recent = nil
		return
	}
	r := &recentEvents{after: prevTail, through: m.Tail}
	if old := m.recent; old != nil && old.through == prevTail {
		r.after, r.events, r.sizes, r.bytes, r.mem = old.after, old.events, old.sizes, old.bytes, old.mem
	}
	r.events = append(r.events, durable...)
	r.sizes = append(r.sizes, sizes...)
	for i := range durable {
		r.bytes += sizes[i]
		r.mem += recentMem(&durable[i])
	}
	drop := 0
	for drop < len(r.events) && (len(r.events)-drop > recentMaxEvents || r.bytes > recentMaxBytes) {
		r.bytes -= r.sizes[drop]
		r.mem -= recentMem(&r.events[drop])
		r.after = r.events[drop].Offset
		drop++
	}
	if drop == len(r.events) {
		m.recent = nil
		return
	}
	r.events, r.sizes = r.events[drop:], r.sizes[drop:]
	m.recent = r
}

// page returns the page a read of the durable events after after (at most limit of them, within
// budget bytes) would return on row, when r holds all of them: at head, as readEventsIn reads it.
func (r *recentEvents) page(row *streamRow, after int64, limit, budget int) (foldtype.ReadPage, bool) {
	if r == nil || r.through != row.Tail || row.ForkedFrom.Valid {
		return foldtype.ReadPage{}, false
	}
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	limit = min(limit, MaxReadLimit)
	after = max(after, 0)
	if after < r.after {
		return foldtype.ReadPage{}, false
	}
	i, _ := slices.BinarySearchFunc(r.events, after, func(ev foldtype.Event, off int64) int {
		switch {
		case ev.Offset <= off:
			return -1
		default:
			return 1
		}
	})
	bytes := 0
	for _, n := range r.sizes[i:] {
		bytes += n
	}
	if len(r.events)-i > limit || (bytes > budget && len(r.events)-i > 1) {
		return foldtype.ReadPage{}, false // the read would cut the page: leave it to the read
	}
	return foldtype.ReadPage{Events: slices.Clone(r.events[i:]), AtHead: true,
		ScannedThroughOffset: max(after, row.Tail)}, true
}

// recentKept is what the writer keeps of recent events: per stream the memory its committed
// entry holds, and the streams in the order they started keeping them.
type recentKept struct {
	bytes int
	seq   uint64
	by    map[string]recentEntry
	order []recentAt
}

type recentEntry struct {
	bytes int
	seq   uint64
}

type recentAt struct {
	path string
	seq  uint64
}

// keptRecent notes the recent events (nil: none) of the committed state m of the stream at path,
// and drops those of the streams that started keeping them longest ago while all together hold
// more than recentTotalBytes. Writer only, after a commit.
func (ws *writerState) keptRecent(path string, m *streamMem) {
	k := &ws.recent
	if m.recent == nil && len(k.by) == 0 {
		return
	}
	if k.by == nil {
		k.by = make(map[string]recentEntry)
	}
	old, had := k.by[path]
	switch {
	case m.recent == nil && !had:
		return
	case m.recent == nil:
		k.bytes -= old.bytes
		delete(k.by, path)
		return
	case had:
		k.bytes += m.recent.mem - old.bytes
		k.by[path] = recentEntry{bytes: m.recent.mem, seq: old.seq}
	default:
		k.seq++
		k.bytes += m.recent.mem
		k.by[path] = recentEntry{bytes: m.recent.mem, seq: k.seq}
		k.order = append(k.order, recentAt{path: path, seq: k.seq})
	}
	if len(k.order) > 2*len(k.by)+recentOrderSlack {
		// Streams that stopped keeping and started again left stale places behind: drop them, so
		// the order stays proportional to the streams keeping events.
		live := k.order[:0]
		for _, at := range k.order {
			if e, ok := k.by[at.path]; ok && e.seq == at.seq {
				live = append(live, at)
			}
		}
		clear(k.order[len(live):])
		k.order = live
	}
	for k.bytes > recentTotalBytes && len(k.order) > 0 {
		at := k.order[0]
		k.order = k.order[1:]
		e, ok := k.by[at.path]
		if !ok || e.seq != at.seq {
			continue // dropped or started again since
		}
		k.bytes -= e.bytes
		delete(k.by, at.path)
		if c, ok := ws.streams.peek(at.path); ok {
			c.recent = nil // no write holds the committed entry now: it is changed in place
		}
	}
}
