package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
)

// fakeClock fires AfterFunc callbacks only when advanced.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves time forward and runs the callbacks that came due, in order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			due = append(due, t)
		} else if !t.stopped {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

func TestProducerLingerUsesInjectedClock(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	clock := &fakeClock{now: time.Unix(0, 0)}
	s, _ := client.NewStream(srv.URL+"/s", client.Config{Clock: clock})
	s.SetContentType("application/json")
	p, _ := client.NewIdempotentProducer(s, "linger", client.ProducerConfig{Linger: 10 * time.Millisecond})
	p.Append([]byte(`1`))
	p.Append([]byte(`2`))
	clock.Advance(9 * time.Millisecond)
	select {
	case b := <-bodies:
		t.Fatalf("batch %s sent before the linger elapsed", b)
	default:
	}
	if got := p.PendingCount(); got != 2 {
		t.Errorf("PendingCount before linger: got %d, want 2", got)
	}
	clock.Advance(time.Millisecond)
	if got := <-bodies; got != "[1,2]" {
		t.Errorf("batch body: got %s, want [1,2]", got)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}
