// Package heapfloor keeps the garbage collector from running more often than a heap of a given
// size would need.
//
// Go's collector starts a cycle when the heap has grown by GOGC percent of the live heap, with a
// floor of 4 MiB. A server whose live heap is a megabyte or two but which allocates tens of
// megabytes a second (a request's headers, its body, the database's buffers) then collects every
// few milliseconds, and each cycle's fixed cost — stopping the world twice, scanning the stacks,
// sweeping — is paid hundreds of times a second. Start raises the percent while the live heap is
// small, so that the heap may grow to the floor before a cycle starts, and gives it back as the
// live heap grows: above the floor the collector runs exactly as GOGC says. The memory this costs
// is at most the floor.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultFloor is the heap size below which the collector does not start a cycle (32 MiB).
const DefaultFloor = 32 << 20

// runtimeMinimum is the heap size Go's collector lets the heap reach before a cycle at GOGC=100
// whatever the live heap; it scales with the percent (at 800, 32 MiB).
const runtimeMinimum = 4 << 20

// Percent is the GC percent that lets a heap of live bytes grow to floor before the next cycle,
// never less than base (the percent GOGC gave). It is also bounded so that the runtime's own
// minimum heap, which grows with the percent, stays within the floor: before the first
// collection (nothing live yet) and for a tiny live heap the goal is then the floor, not more.
// With base < 0 (GOGC=off) or floor 0 it is base.
func Percent(live, floor uint64, base int) int {
	if base < 0 || floor == 0 || live >= floor {
		return base
	}
	limit := floor * 100 / runtimeMinimum
	p := limit
	if live > 0 {
		p = min((floor-live)*100/live, limit)
	}
	return max(int(p), base)
}

// Start keeps the heap floor from now on: after every collection it sets the GC percent that
// lets the live heap grow to floor (Percent), starting from the percent in force now (GOGC's).
// GOMEMLIMIT still bounds the heap. stop ends it and restores that percent. The percent is the
// process's: while one floor is kept, a second Start does nothing (its stop neither).
func Start(floor uint64) (stop func()) {
	started.Lock()
	defer started.Unlock()
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 || floor == 0 || started.on {
		return func() {}
	}
	started.on = true
	t := &tuner{floor: floor, base: base, set: base}
	t.samples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t.tune()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.stopped {
			return
		}
		t.stopped = true
		debug.SetGCPercent(t.base)
		started.Lock()
		started.on = false
		started.Unlock()
	}
}

// started reports whether a floor is kept.
var started struct {
	sync.Mutex
	on bool
}

type tuner struct {
	mu      sync.Mutex
	floor   uint64
	base    int
	set     int // the percent last set
	stopped bool
	samples []metrics.Sample
}

// sentinel is allocated to learn of the next collection: its cleanup runs after the cycle that
// found it unreachable. It holds a pointer so that it is never a tiny allocation (tiny objects
// share a block, and their cleanups may not run).
type sentinel struct {
	p *int
	_ [8]byte
}

// arm asks to be told of the next collection.
func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// tune sets the percent for the live heap the last collection left; it reports false once
// stopped.
func (t *tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	if t.samples[0].Value.Kind() != metrics.KindUint64 {
		return false
	}
	p := Percent(t.samples[0].Value.Uint64(), t.floor, t.base)
	// Setting the percent recomputes the heap goal; skip changes under a fifth, which move the
	// goal little, so that a steady heap does not set it after every cycle.
	if d := p - t.set; d*5 > t.set || -d*5 > t.set {
		debug.SetGCPercent(p)
		t.set = p
	}
	return true
}
