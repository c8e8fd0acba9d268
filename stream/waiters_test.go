package stream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
)

// waitAsync starts a waiter and returns its result channel once it is registered.
func waitAsync(t *testing.T, s *Store, path string, opts WaitOptions) <-chan waitResult {
	t.Helper()
	s.ev.waiters.mu.Lock()
	if s.ev.waiters.registered == nil {
		s.ev.waiters.registered = make(chan struct{}, 16)
	}
	registered := s.ev.waiters.registered
	s.ev.waiters.mu.Unlock()
	out := make(chan waitResult, 1)
	go func() {
		ev, err := s.WaitForEvent(context.Background(), path, opts)
		out <- waitResult{ev, err}
	}()
	<-registered
	return out
}

type waitResult struct {
	ev  foldstream.Event
	err error
}

// a waiter resolves from the fresh batch; a type filter waits for a matching type.
func TestWaiterResolvesFromFreshBatch(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	any := waitAsync(t, s, "/w", WaitOptions{})
	typed := waitAsync(t, s, "/w", WaitOptions{Types: []string{"done"}})
	mustAppend(t, s, "/w", ev("start"), ev("step"))
	if r := <-any; r.err != nil || r.ev.Type != "start" || r.ev.Offset != 1 {
		t.Fatalf("any: got %+v", r)
	}
	select {
	case r := <-typed:
		t.Fatalf("typed waiter resolved early: %+v", r)
	default:
	}
	mustAppend(t, s, "/w", ev("done"))
	if r := <-typed; r.err != nil || r.ev.Type != "done" || r.ev.Offset != 3 {
		t.Fatalf("typed: got %+v", r)
	}
}

// an explicit After resolves from history (first match after it, paging as needed); the
// default waits for the next event; an After ahead of the head is not satisfied by an earlier event.
func TestWaiterFromHistory(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	in := make([]foldstream.EventInput, 1500)
	for i := range in {
		in[i] = ev("filler")
	}
	in[1200] = ev("needle") // offset 1201: beyond the first page
	mustAppend(t, s, "/w", in...)
	after := int64(10)
	got, err := s.WaitForEvent(ctx, "/w", WaitOptions{Types: []string{"needle"}, After: &after})
	if err != nil || got.Offset != 1201 {
		t.Fatalf("from history: got %+v, %v; want needle@1201", got, err)
	}
	next := waitAsync(t, s, "/w", WaitOptions{})
	mustAppend(t, s, "/w", ev("fresh"))
	if r := <-next; r.ev.Offset != 1501 {
		t.Fatalf("default waiter: got %+v, want the next event @1501", r)
	}
	ahead := int64(1503)
	far := waitAsync(t, s, "/w", WaitOptions{After: &ahead})
	mustAppend(t, s, "/w", ev("x"), ev("x")) // 1502, 1503: not after 1503
	select {
	case r := <-far:
		t.Fatalf("a waiter ahead of the head resolved by an earlier event: %+v", r)
	default:
	}
	mustAppend(t, s, "/w", ev("y"))
	if r := <-far; r.ev.Offset != 1504 {
		t.Fatalf("ahead waiter: got %+v, want @1504", r)
	}
}

// a timeout writes nothing; an ephemeral resolves a waiter; one event resolves several
// waiters; a re-append made in response to a waiter cannot outrun the commit that woke it.
func TestWaiterTimeoutEphemeralAndOrder(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitForEvent(ctx, "/w", WaitOptions{Timeout: 5 * time.Second})
		done <- err
	}()
	clk.WaitArmed(t, testT.Add(5*time.Second))
	sp := s.savepoints()
	clk.Advance(5 * time.Second)
	if err := <-done; !errors.Is(err, foldstream.ErrWaitTimeout) {
		t.Fatalf("timeout: got %v, want WAIT_TIMEOUT", err)
	}
	if s.savepoints() != sp || countRows(t, s, `SELECT count(*) FROM streams`) != 0 {
		t.Fatal("a timed-out waiter wrote something")
	}
	mustCreate(t, s, CreateRequest{Path: "/w", ContentType: EventContentType}) // an ephemeral alone creates no stream

	w1 := waitAsync(t, s, "/w", WaitOptions{Types: []string{"chunk"}})
	w2 := waitAsync(t, s, "/w", WaitOptions{Types: []string{"chunk"}})
	mustAppend(t, s, "/w", eph("chunk"))
	for _, w := range []<-chan waitResult{w1, w2} {
		if r := <-w; r.err != nil || r.ev.Offset != 1 || !r.ev.Ephemeral {
			t.Fatalf("ephemeral waiter: got %+v", r)
		}
	}

	// A subscriber sees the outer commit before the re-append a waiter made in response.
	var rec recorder
	sub := subscribe(t, s, "/w", &rec, SubscribeOptions{})
	w3 := waitAsync(t, s, "/w", WaitOptions{Types: []string{"outer"}})
	reply := make(chan error, 1)
	go func() {
		r := <-w3
		_, err := s.Append(ctx, "/w", ev("inner"))
		reply <- errors.Join(r.err, err)
	}()
	mustAppend(t, s, "/w", ev("outer"))
	if err := <-reply; err != nil {
		t.Fatal(err)
	}
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	var flat []string
	for _, p := range rec.got() {
		flat = append(flat, p)
	}
	if want := []string{"(1,2][outer@2]", "(2,3][inner@3]"}; !slices.Equal(flat, want) && !slices.Equal(flat, []string{"(1,3][outer@2 inner@3]"}) {
		t.Fatalf("pushes: got %v, want outer before inner", flat)
	}
}
