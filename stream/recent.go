package stream

import (
	"slices"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Recent events (docs/store.md#engines-of-a-pattern).
//
// Over many streams a pattern host opens an engine for nearly every batch that lands: the batch
// commits, the host hears of it, and the engine's opening reads the events after its checkpoint —
// usually that batch and the stream's wake record, which the writer had in hand, decoded, a moment
// before. So on an exclusive database, while a commit watcher is registered (a host runs
// patterns), the writer keeps beside its state of a stream the durable events last appended to
// it through the event view, and Events.ReadOpening answers an opening for work's page from them
// when they hold every event after the checkpoint: no read of the records, no decoding.
//
// The events live in a row extension of the stream's entry in the writer's cache (kernel.RowExt),
// so they are staged with it and take effect only if the write and its group commit. They cover (after, through], where through was the stream's
// tail when they were kept: any other change of the tail (a protocol append, a huge record in
// slices) leaves them behind it, and they are not used until an event append starts them again.
// Each stream keeps at most recentMaxEvents events and recentMaxBytes of stored bodies, and all
// together at most recentTotalBytes (estimated as eventBytes does); past it the streams that
// started keeping theirs longest ago drop them first. Openings queue behind the appends when
// batches land on many streams faster than engines open, so the budget is what decides how deep
// a backlog of openings still finds its events in memory: at 16 MiB, about 10,000 streams whose
// last batch was ten small events.
//
// Events an opening has read are mostly done with: the engine that read them processes them and
// writes its checkpoint past them. Only another engine of the same stream opening soon after (a
// second processor on the path, an engine closed and opened again before the next batch) wants
// them again. So an opening that took its page from them marks them read, and read events count
// against a budget of their own, recentReadBytes, dropped in the order they were read: over many
// streams the writer no longer holds 16 MiB of events nobody will ask for (folding over 100,000
// streams the heap left after a GC cycle went from ~63 MB to ~22 MB; the collector then runs more
// cycles over the smaller heap, for about the same CPU). An append to the stream makes them
// unread again.

const (
	// recentOrderSlack is how many stale places the order of recentKept may hold beyond twice the
	// streams keeping events before keptRecent compacts it.
	recentOrderSlack = 64
	recentMaxEvents  = 64
	recentMaxBytes   = 64 << 10
	recentTotalBytes = 16 << 20
	recentReadBytes  = 1 << 20
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
	read           bool  // an opening took its page from them
}

// markedRead returns r marked read by an opening (a copy: a kept value is never changed).
func (r *recentEvents) markedRead() *recentEvents {
	if r == nil || r.read {
		return r
	}
	c := *r
	c.read = true
	return &c
}

// recentMem estimates the memory one kept event holds.
func recentMem(ev *foldtype.Event) int { return eventBytes(*ev) + 8 }

// keepsRecent reports whether the writer keeps recent events: only an opening in the writer
// (ReadOpening for work, exclusive databases) reads them, and only a host watching commits opens
// engines that way.
func (s *Store) keepsRecent() bool { return s.exclusive && s.k.Landed().Registered() }

// keepRecent sets m's recent events after an event append that moved its tail from prevTail to
// m.Tail, writing durable (the batch's new durable events, sizes their stored body lengths).
func (s *Store) keepRecent(m *kernel.StreamState, prevTail int64, durable []foldtype.Event, sizes []int) {
	if m.Row.ForkedFrom.Valid || m.Tail <= prevTail || len(durable) == 0 {
		s.recentExt.Set(m, nil)
		return
	}
	r := &recentEvents{after: prevTail, through: m.Tail}
	if old := s.recentExt.Get(m); old != nil && old.through == prevTail {
		r.after, r.events, r.sizes, r.bytes, r.mem = old.after, old.events, old.sizes, old.bytes, old.mem
	}
	if r.events == nil {
		// Room for one more: a stream's wake record often follows its first batch kept (an engine
		// opening to work on it), and is then kept in place instead of copying the batch.
		r.events = make([]foldtype.Event, 0, len(durable)+1)
		r.sizes = make([]int, 0, len(durable)+1)
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
		s.recentExt.Set(m, nil)
		return
	}
	r.events, r.sizes = r.events[drop:], r.sizes[drop:]
	s.recentExt.Set(m, r)
}

// page returns the page a read of the durable events after after (at most limit of them, within
// budget bytes) would return on row, when r holds all of them: at head, as readEventsIn reads it.
func (r *recentEvents) page(row *driver.Stream, after int64, limit, budget int) (foldtype.ReadPage, bool) {
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
// entry holds, and the streams in the order they started keeping them (unread) or were read.
type recentKept struct {
	bytes     int // of the unread entries
	readBytes int // of the read ones
	seq       uint64
	by        map[string]recentEntry
	order     []recentAt // unread entries, in the order they started keeping events
	readOrder []recentAt // read entries, in the order they were read
}

type recentEntry struct {
	bytes int
	seq   uint64 // new whenever the entry starts or moves from unread to read
	read  bool
}

type recentAt struct {
	path string
	seq  uint64
}

// useRecent registers the recent events' bookkeeping with the kernel: every committed state of a
// stream passes through keptRecent.
func (s *Store) useRecent() { s.k.OnApplied(s.keptRecent) }

// keptRecent notes the recent events (nil: none) of the committed state m of the stream at path,
// and drops those of the streams that started keeping them longest ago while the unread ones
// hold more than recentTotalBytes, and those read longest ago while the read ones hold more than
// recentReadBytes. Writer only, after a commit.
func (s *Store) keptRecent(path string, m *kernel.StreamState) {
	k := &s.ls.recent
	recent := s.recentExt.Get(m)
	if recent == nil && len(k.by) == 0 {
		return
	}
	if k.by == nil {
		k.by = make(map[string]recentEntry)
	}
	pool := func(read bool) *int {
		if read {
			return &k.readBytes
		}
		return &k.bytes
	}
	old, had := k.by[path]
	switch {
	case recent == nil && !had:
		return
	case recent == nil:
		*pool(old.read) -= old.bytes
		delete(k.by, path)
		return
	case had && old.read == recent.read:
		*pool(old.read) += recent.mem - old.bytes
		k.by[path] = recentEntry{bytes: recent.mem, seq: old.seq, read: old.read}
	default:
		if had {
			*pool(old.read) -= old.bytes
		}
		k.seq++
		read := recent.read
		*pool(read) += recent.mem
		k.by[path] = recentEntry{bytes: recent.mem, seq: k.seq, read: read}
		if read {
			k.readOrder = append(k.readOrder, recentAt{path: path, seq: k.seq})
		} else {
			k.order = append(k.order, recentAt{path: path, seq: k.seq})
		}
	}
	if len(k.order)+len(k.readOrder) > 2*len(k.by)+recentOrderSlack {
		// Streams that stopped keeping and started again, or were read, left stale places
		// behind: drop them, so the orders stay proportional to the streams keeping events.
		k.order = k.liveIn(k.order)
		k.readOrder = k.liveIn(k.readOrder)
	}
	k.order = k.drop(s, k.order, &k.bytes, recentTotalBytes)
	k.readOrder = k.drop(s, k.readOrder, &k.readBytes, recentReadBytes)
}

// liveIn returns the places of order that are their stream's current entry.
func (k *recentKept) liveIn(order []recentAt) []recentAt {
	live := order[:0]
	for _, at := range order {
		if e, ok := k.by[at.path]; ok && e.seq == at.seq {
			live = append(live, at)
		}
	}
	clear(order[len(live):])
	return live
}

// drop drops the entries first in order while bytes, their pool's total, is over budget, and
// returns what is left of order.
func (k *recentKept) drop(s *Store, order []recentAt, bytes *int, budget int) []recentAt {
	for *bytes > budget && len(order) > 0 {
		at := order[0]
		order = order[1:]
		e, ok := k.by[at.path]
		if !ok || e.seq != at.seq {
			continue // dropped, started again or read since
		}
		*bytes -= e.bytes
		delete(k.by, at.path)
		if c, ok := s.k.CachedStream(at.path); ok {
			s.recentExt.Set(c, nil) // no write holds the committed entry now: it is changed in place
		}
	}
	return order
}
