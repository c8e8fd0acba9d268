package host

import (
	"fmt"
	"testing"
)

// TestWokenSetStaysBoundedAndRemembersTheLatest: a host that wakes ever more streams remembers at
// most maxWokenRemembered of them (it grew by one entry per stream woken since start), always
// the one it just woke, and a stream at a path re-created since (another id) counts as not woken.
func TestWokenSetStaysBoundedAndRemembersTheLatest(t *testing.T) {
	var w wokenSet
	for i := range maxWokenRemembered + 100 {
		p := fmt.Sprintf("/s/%d", i)
		w.add(p, int64(i+1))
		if !w.has(p, int64(i+1)) {
			t.Fatalf("%s: not remembered right after waking it", p)
		}
	}
	if n := w.len(); n != maxWokenRemembered {
		t.Fatalf("remembered %d streams, want at most %d", n, maxWokenRemembered)
	}
	last := fmt.Sprintf("/s/%d", maxWokenRemembered+99)
	if w.has(last, 1) {
		t.Fatalf("%s with another stream's id counts as woken", last)
	}
}
