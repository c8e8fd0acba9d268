package host_test

import (
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

var testT = time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock fires AfterFunc callbacks when Advance passes their deadline (a non-positive delay fires
// at once) and reports every armed deadline on armedC, so tests can wait for a re-claim exactly.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	armedC chan time.Time
}

type fakeTimer struct {
	at             time.Time
	f              func()
	stopped, fired bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: testT, armedC: make(chan time.Time, 1024)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	if d <= 0 {
		t.fired = true
	}
	c.mu.Unlock()
	c.armedC <- t.at
	if d <= 0 {
		go f()
	}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.fired || t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.fired && !t.stopped && !t.at.After(c.now) {
			t.fired = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		go t.f()
	}
}

// waitArmed waits until some timer is armed for at. Claims can be armed by engines (claim writes)
// or the alarm loop; either way the deadline is what the test asserts.
func (c *fakeClock) waitArmed(t testing.TB, at time.Time) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-c.armedC:
			if got.Equal(at) {
				return
			}
		case <-timeout:
			t.Fatalf("no timer armed for %v", at)
		}
	}
}
