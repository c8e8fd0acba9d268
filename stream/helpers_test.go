package stream

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
)

// fakeClock is a manual clock: AfterFunc callbacks run (each in its own goroutine) when Advance
// moves time past their deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	armedC chan time.Time // receives every AfterFunc deadline, when set
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

// testT is the spec's test clock (§14.2).
var testT = time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{now: testT, armedC: make(chan time.Time, 1024)} }

// waitArmed waits until a timer is armed for at.
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
			t.Fatalf("no timer armed for %v (armed: %v)", at, c.armed())
		}
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	due := d <= 0
	if due {
		t.fired = true
	}
	armedC := c.armedC
	c.mu.Unlock()
	if armedC != nil {
		armedC <- t.at
	}
	if due {
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

// Advance moves the clock by d and fires every timer that fell due.
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

// armed returns the deadlines of pending timers.
func (c *fakeClock) armed() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, t := range c.timers {
		if !t.fired && !t.stopped {
			out = append(out, t.at)
		}
	}
	return out
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup opens an in-memory store with a fake clock.
func setup(t testing.TB) (*Store, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	s, err := Open(":memory:", Options{Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// setupFile opens a store in a file under a temp dir.
func setupFile(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func ev(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ} }

func eph(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ, Ephemeral: true} }

func offsets(evs []foldstream.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Offset
	}
	return out
}

func mustAppend(t testing.TB, s *Store, path string, in ...foldstream.EventInput) []foldstream.Event {
	t.Helper()
	out, err := s.Append(context.Background(), path, in...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return out
}

func mustRead(t testing.TB, s *Store, path string, after int64, limit int, opts ReadOptions) foldstream.ReadPage {
	t.Helper()
	p, err := s.Read(context.Background(), path, after, limit, opts)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return p
}

func countRows(t testing.TB, s *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.readTx(context.Background(), func(tx *sql.Tx) error { return tx.QueryRow(query, args...).Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	return n
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
