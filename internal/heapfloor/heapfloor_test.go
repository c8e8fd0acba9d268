package heapfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
)

// A live heap below the floor gets the percent that lets it grow to the floor (never under
// GOGC's, and never beyond the floor through the runtime's minimum heap); at or above the floor,
// with GOGC=off, or without a floor, GOGC's percent stands.
func TestPercentLetsASmallLiveHeapGrowToTheFloorAndNoFurther(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"1 MiB live, 32 MiB floor: the runtime's minimum heap (4 MiB at 100) is the floor", 1 * mib, 32 * mib, 100, 800},
		{"4 MiB live", 4 * mib, 32 * mib, 100, 700},
		{"10 MiB live", 10 * mib, 32 * mib, 100, 220},
		{"16 MiB live: GOGC already reaches the floor", 16 * mib, 32 * mib, 100, 100},
		{"live above the floor", 40 * mib, 32 * mib, 100, 100},
		{"GOGC=300 above what the floor needs", 10 * mib, 32 * mib, 300, 300},
		{"a tiny live heap", 1000, 32 * mib, 100, 800},
		{"nothing live yet", 0, 32 * mib, 100, 800},
		{"a floor under the runtime's minimum heap", 1000, 2 * mib, 100, 100},
		{"GOGC=off", 1 * mib, 32 * mib, -1, -1},
		{"no floor", 1 * mib, 0, 100, 100},
	} {
		if got := Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", c.name, c.live, c.floor, c.base, got, c.want)
		}
	}
}

// After a collection the percent in force is the one the floor asks for; stopping gives GOGC's
// back.
func TestStartRaisesTheGCPercentAfterACollectionAndStopRestoresIt(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	stop := Start(1 << 30)
	var p int
	if !wait.For(10*time.Second, func() bool {
		runtime.GC()
		p = debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p > 100
	}) {
		stop()
		t.Fatalf("GC percent still %d after collections with a 1 GiB floor", p)
	}
	stop()
	p = debug.SetGCPercent(100)
	if p != 100 {
		t.Fatalf("GC percent %d after stop, want GOGC's 100", p)
	}
}

// The percent is the process's: a second Start while a floor is kept changes nothing, and its
// stop does not end the first.
func TestASecondStartLeavesTheFirstFloorInPlace(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	stop := Start(1 << 30)
	defer stop()
	Start(0)()
	Start(1 << 20)()
	started.Lock()
	on := started.on
	started.Unlock()
	if !on {
		t.Fatal("a second Start's stop ended the first floor")
	}
}
