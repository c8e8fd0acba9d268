package kernel

// The writer's stream cache and the incarnation's marks (writer.go), bounded so a store with millions of
// streams keeps only the recently written ones in memory (docs/store.md#one-writer).

// DefaultMaxCachedStreams is the default of Config.MaxCachedStreams.
const DefaultMaxCachedStreams = 200_000

// streamCache holds the writer's StreamState by path, at most max of them (see evictable for the
// entries that may stay beyond it). Eviction is a clock (second chance): every lookup and update
// marks its entry used, and the hand passes over used entries once, clearing the mark, before it
// evicts one.
// An evicted stream is read again from the database on its next write: on an exclusive driver
// every change to a stream goes through the writer, so the row holds all an entry held except
// what evictable keeps.
type streamCache struct {
	max   int
	index map[string]int // path → position in ring
	ring  []cacheSlot
	hand  int
	// pinned reports a path the cache must keep (a stream taking a record in slices).
	pinned func(path string) bool
}

type cacheSlot struct {
	path string
	m    *StreamState
	used bool
}

func newStreamCache(max int, pinned func(string) bool) *streamCache {
	return &streamCache{max: max, index: make(map[string]int), pinned: pinned}
}

// get returns the cached state of path, marking it used.
func (c *streamCache) get(path string) (*StreamState, bool) {
	i, ok := c.index[path]
	if !ok {
		return nil, false
	}
	c.ring[i].used = true
	return c.ring[i].m, true
}

// peek returns the cached state of path without marking it used.
func (c *streamCache) peek(path string) (*StreamState, bool) {
	i, ok := c.index[path]
	if !ok {
		return nil, false
	}
	return c.ring[i].m, true
}

// len is the number of cached streams.
func (c *streamCache) len() int { return len(c.ring) }

// put caches m as the state of path. Beyond max it evicts: up to two entries per put, so a cache
// that grew while its entries had to stay shrinks back once they may go.
func (c *streamCache) put(path string, m *StreamState) {
	if i, ok := c.index[path]; ok {
		c.ring[i].m, c.ring[i].used = m, true
	} else {
		// A newcomer is not marked used: a stream written once goes before the ones written
		// again.
		c.index[path] = len(c.ring)
		c.ring = append(c.ring, cacheSlot{path: path, m: m})
	}
	for range 2 {
		if len(c.ring) <= c.max {
			return
		}
		i, ok := c.victim()
		if !ok {
			return
		}
		c.removeAt(i)
	}
}

// victim moves the hand to an entry that may be evicted and returns its position; false when
// every entry must stay (then the cache holds more than max until some may go).
func (c *streamCache) victim() (int, bool) {
	for range 2 * len(c.ring) {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		i := c.hand
		c.hand++
		s := &c.ring[i]
		if !c.evictable(s) {
			continue
		}
		if s.used {
			s.used = false
			continue
		}
		return i, true
	}
	return 0, false
}

// evictable reports whether the entry may leave the cache: not while a write in several steps
// holds the stream (hold.go; its owner checks the cached entry), nor while ephemeral events hold offsets past the
// durable tail — those offsets are in memory only, and a stream read again from its row would
// hand them out a second time.
func (c *streamCache) evictable(s *cacheSlot) bool {
	if s.m.HighestAssigned > s.m.Tail {
		return false
	}
	return c.pinned == nil || !c.pinned(s.path)
}

// remove drops path from the cache.
func (c *streamCache) remove(path string) {
	if i, ok := c.index[path]; ok {
		c.removeAt(i)
	}
}

// removeAt drops the entry at position i; the last entry takes its place.
func (c *streamCache) removeAt(i int) {
	delete(c.index, c.ring[i].path)
	last := len(c.ring) - 1
	if i != last {
		c.ring[i] = c.ring[last]
		c.index[c.ring[i].path] = i
	}
	c.ring[last] = cacheSlot{}
	c.ring = c.ring[:last]
}

// markSet holds the ids of the streams marked by this store incarnation (tx.mark), one bit per id
// in pages of 512 ids: stream ids are handed out in order and never reused, so a million marked
// streams take about 130 kB, against tens of megabytes as a map of ids. It is never trimmed but
// for a deleted stream: the wake marks say a stream got its one wake record of the incarnation
// (docs/store.md#records-nobody-appended), and forgetting a mark would let it get a second.
type markSet struct {
	pages map[int64]*[8]uint64
}

func (w *markSet) has(id int64) bool {
	p := w.pages[id>>9]
	return p != nil && p[(id>>6)&7]&(1<<(uint64(id)&63)) != 0
}

func (w *markSet) add(id int64) {
	if w.pages == nil {
		w.pages = make(map[int64]*[8]uint64)
	}
	p := w.pages[id>>9]
	if p == nil {
		p = new([8]uint64)
		w.pages[id>>9] = p
	}
	p[(id>>6)&7] |= 1 << (uint64(id) & 63)
}

// remove forgets id (its stream was deleted; ids are never reused).
func (w *markSet) remove(id int64) {
	p := w.pages[id>>9]
	if p == nil {
		return
	}
	p[(id>>6)&7] &^= 1 << (uint64(id) & 63)
	if *p == ([8]uint64{}) {
		delete(w.pages, id>>9)
	}
}
