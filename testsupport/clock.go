package testsupport

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// T is the fake clock's start: 2035-01-01T00:00:00Z (docs/engine.md#test-support).
var T = time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)

// FakeClock is a [foldtype.Clock] whose time moves only when told. It fakes wall-clock time
// (claims, revision epochs) and the timers of AfterFunc, which fire on Advance. Every armed
// deadline is recorded, so a test can wait for the code under test to arm one
// ([FakeClock.WaitArmed]) before it advances time.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[int]*fakeTimer

	armed    []time.Time   // every deadline AfterFunc armed, in arming order
	consumed int           // armed[:consumed] were passed over by WaitArmed
	armedC   chan struct{} // closed and replaced whenever a deadline is armed
}

type fakeTimer struct {
	at  time.Time
	seq int
	f   func()
}

var _ foldtype.Clock = (*FakeClock)(nil)

// NewFakeClock returns a clock fixed at [T].
func NewFakeClock() *FakeClock {
	return &FakeClock{now: T, timers: map[int]*fakeTimer{}, armedC: make(chan struct{})}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves time forward by d and fires every timer that fell due, each in its own goroutine,
// in due order.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for id, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, id)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if due[i].at.Equal(due[j].at) {
			return due[i].seq < due[j].seq
		}
		return due[i].at.Before(due[j].at)
	})
	for _, t := range due {
		go t.f()
	}
}

// AfterFunc calls f in its own goroutine once the fake time reached now+d; like time.AfterFunc, a
// non-positive d fires at once.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.now.Add(d)
	c.armed = append(c.armed, at)
	close(c.armedC)
	c.armedC = make(chan struct{})
	if d <= 0 {
		go f()
		return func() bool { return false }
	}
	c.seq++
	id := c.seq
	c.timers[id] = &fakeTimer{at: at, seq: id, f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[id]
		delete(c.timers, id)
		return ok
	}
}

// WaitArmed waits until a timer is armed for exactly at, failing tb after 10 s. Deadlines are
// taken in arming order: those armed before the matching one are passed over and not seen by
// later calls, so waiting twice for the same deadline waits for it to be armed twice.
func (c *FakeClock) WaitArmed(tb testing.TB, at time.Time) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		for c.consumed < len(c.armed) {
			got := c.armed[c.consumed]
			c.consumed++
			if got.Equal(at) {
				c.mu.Unlock()
				return
			}
		}
		ch := c.armedC
		pending := c.pendingLocked()
		c.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			tb.Fatalf("no timer armed for %v (pending: %v)", at, pending)
			return
		}
	}
}

// Pending returns the deadlines of the timers that have neither fired nor been stopped, earliest
// first.
func (c *FakeClock) Pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingLocked()
}

func (c *FakeClock) pendingLocked() []time.Time {
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
