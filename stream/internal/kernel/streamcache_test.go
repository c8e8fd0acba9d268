package kernel

import (
	"fmt"
	"testing"

	"github.com/foldstream/foldstream/stream/driver"
)

func TestWokenSetHoldsIdsAcrossPagesAndForgetsDeletedOnes(t *testing.T) {
	var w markSet
	ids := []int64{1, 63, 64, 511, 512, 513, 4097, 1 << 40}
	for _, id := range ids {
		if w.has(id) {
			t.Fatalf("%d woken before add", id)
		}
		w.add(id)
	}
	for _, id := range ids {
		if !w.has(id) {
			t.Fatalf("%d not woken after add", id)
		}
	}
	for _, id := range []int64{2, 62, 65, 510, 514, 4096, 1<<40 + 1} {
		if w.has(id) {
			t.Fatalf("%d woken, never added", id)
		}
	}
	w.remove(512)
	if w.has(512) || !w.has(513) || !w.has(511) {
		t.Fatal("remove(512) took the wrong bits")
	}
	for _, id := range ids {
		w.remove(id)
	}
	if len(w.pages) != 0 {
		t.Fatalf("%d pages left after removing every id", len(w.pages))
	}
}

func TestStreamCacheEvictsUnusedFirstAndKeepsPinnedAndEphemeralTails(t *testing.T) {
	pinned := map[string]bool{}
	c := newStreamCache(2, func(p string) bool { return pinned[p] })
	put := func(p string, highest, tail int64) {
		c.put(p, &StreamState{HighestAssigned: highest, Tail: tail})
	}
	put("/a", 1, 1)
	put("/b", 1, 1)
	c.get("/a") // used again: the clock passes it once
	put("/c", 1, 1)
	if _, ok := c.get("/a"); !ok || c.len() != 2 {
		t.Fatalf("after a third stream: /a cached %v, %d entries; want /a kept, 2 entries", ok, c.len())
	}
	if _, ok := c.get("/b"); ok {
		t.Fatal("/b is still cached; it was the one not used since")
	}
	pinned["/a"] = true
	put("/c", 5, 3) // ephemeral offsets past its tail
	put("/d", 1, 1)
	put("/e", 1, 1)
	for _, p := range []string{"/a", "/c"} {
		if _, ok := c.get(p); !ok {
			t.Fatalf("%s was evicted; it must stay", p)
		}
	}
	pinned["/a"] = false
	put("/c", 5, 5)
	put("/f", 1, 1)
	put("/f", 1, 1)
	if c.len() > 2 {
		t.Fatalf("%d entries once every entry may go; want the cache back at 2", c.len())
	}
	c.remove("/f")
	if _, ok := c.get("/f"); ok || c.len() > 1 {
		t.Fatalf("remove left /f (%v) or %d entries", ok, c.len())
	}
}

// A write works on a copy of the cached entry; a producer state it caches must not reach the
// entry unless the write commits (the copy replaces the entry then).
func TestProducerStateCachedByAWriteStaysOnItsCopy(t *testing.T) {
	committed := &StreamState{}
	committed.setProducer("p", driver.Producer{ID: "p", LastSeq: 1})
	staged := *committed
	staged.setProducer("p", driver.Producer{ID: "p", LastSeq: 2})
	staged.setProducer("q", driver.Producer{})
	if got := committed.producers["p"].LastSeq; got != 1 || len(committed.producers) != 1 {
		t.Fatalf("the committed entry changed with its copy: %+v", committed.producers)
	}
	if got := staged.producers["p"].LastSeq; got != 2 {
		t.Fatalf("the copy holds seq %d, want 2", got)
	}
	full := &StreamState{}
	for i := range maxCachedProducers + 3 {
		full.setProducer(string(rune('a'+i)), driver.Producer{})
	}
	if len(full.producers) != maxCachedProducers {
		t.Fatalf("%d producers cached, want the cap %d", len(full.producers), maxCachedProducers)
	}
}

// A stream's set of producers known at its creation ends when the cap leaves a producer out, and
// not before.
func TestProducerSetKnownAtCreationEndsAtTheCap(t *testing.T) {
	m := &StreamState{producersAll: true}
	for i := range maxCachedProducers {
		m.setProducer(fmt.Sprintf("p%d", i), driver.Producer{ID: fmt.Sprintf("p%d", i)})
	}
	if !m.producersAll {
		t.Fatal("the set ended within the cap")
	}
	m.setProducer("p0", driver.Producer{ID: "p0", LastSeq: 1})
	if !m.producersAll {
		t.Fatal("the set ended on an update of a cached producer")
	}
	m.setProducer("over", driver.Producer{ID: "over"})
	if m.producersAll {
		t.Fatal("a producer left out by the cap kept the set marked complete")
	}
}
