package testsupport

import (
	"sort"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
)

// T is the fake clock's start: 2035-01-01T00:00:00Z (spec §14.2).
var T = time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)

// FakeClock is a [foldstream.Clock] whose time moves only when told. It fakes wall-clock time
// (claims, revision epochs) and the timers of AfterFunc, which fire on Advance.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[int]*fakeTimer
}

type fakeTimer struct {
	at  time.Time
	seq int
	f   func()
}

var _ foldstream.Clock = (*FakeClock)(nil)

// NewFakeClock returns a clock fixed at [T].
func NewFakeClock() *FakeClock { return &FakeClock{now: T, timers: map[int]*fakeTimer{}} }

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

// AfterFunc calls f in its own goroutine once the fake time reached now+d.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.timers[id] = &fakeTimer{at: c.now.Add(d), seq: id, f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[id]
		delete(c.timers, id)
		return ok
	}
}
