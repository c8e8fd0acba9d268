package stream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Waiting for an event with the store's public API: a subscription that consumes the types
// waited for, registered before history is searched, and a read of history (ephemerals
// included) when an offset to search after is given. An event committed in between is seen by
// one or both, and history's answer, the earlier one, wins.

// waitOptions says which event a waiter waits for.
type waitOptions struct {
	// types filters by event type; empty matches every durable event.
	types []string
	// after, when set, also searches history: the first matching event with offset > *after;
	// when nil, the waiter waits for the next matching event committed after the call.
	after *int64
	// timeout fails the wait with WAIT_TIMEOUT after this long on the store's clock; 0 waits
	// until ctx ends.
	timeout time.Duration
}

// waitForEvent returns the first event on the stream at path that matches o. registered, when not
// nil, receives the waiter's subscription once it is in place.
func waitForEvent(ctx context.Context, s *Store, path string, o waitOptions, registered chan<- *Subscription) (foldtype.Event, error) {
	after := int64(-1)
	if o.after != nil {
		after = max(*o.after, 0)
	}
	matches := func(ev foldtype.Event) bool {
		return ev.Offset > after && (len(o.types) == 0 || slices.Contains(o.types, ev.Type))
	}
	found := make(chan foldtype.Event, 1)
	var consumes []string
	if len(o.types) > 0 {
		consumes = o.types
	}
	sub, err := s.Events().Subscribe(path, func(_ context.Context, evs []foldtype.Event, _ foldtype.ScannedRange) error {
		for _, ev := range evs {
			if matches(ev) {
				select {
				case found <- ev:
				default: // resolved already
				}
				return nil
			}
		}
		return nil
	}, SubscribeOptions{Consumes: consumes, Name: "test waiter"})
	if err != nil {
		return foldtype.Event{}, err
	}
	defer sub.Close()
	if registered != nil {
		registered <- sub
	}
	if o.after != nil {
		for from := after; ; {
			p, err := s.readEvents(ctx, path, from, MaxReadLimit, readOptions{IncludeEphemeral: true})
			if err != nil {
				return foldtype.Event{}, err
			}
			for _, ev := range p.Events {
				if matches(ev) {
					return ev, nil
				}
			}
			if p.AtHead || p.ScannedThroughOffset <= from {
				break
			}
			from = p.ScannedThroughOffset
		}
	}
	var timeout chan struct{}
	if o.timeout > 0 {
		timeout = make(chan struct{})
		stop := s.Clock().AfterFunc(o.timeout, func() { close(timeout) })
		defer stop()
	}
	select {
	case ev := <-found:
		return ev, nil
	case <-timeout:
		return foldtype.Event{}, foldtype.NewError(foldtype.CodeWaitTimeout, nil, "no matching event on %s in %s", path, o.timeout)
	case <-ctx.Done():
		return foldtype.Event{}, ctx.Err()
	}
}

// waiter is a wait in progress.
type waiter struct {
	result <-chan waitResult
	sub    *Subscription
}

// waitAsync starts a waiter and returns once its subscription is in place.
func waitAsync(t *testing.T, s *Store, path string, o waitOptions) waiter {
	t.Helper()
	registered := make(chan *Subscription, 1)
	out := make(chan waitResult, 1)
	go func() {
		ev, err := waitForEvent(context.Background(), s, path, o, registered)
		out <- waitResult{ev, err}
	}()
	return waiter{result: out, sub: <-registered}
}

// pending fails the test when w resolved, once every commit so far has been delivered to it.
func (w waiter) pending(t *testing.T, what string) {
	t.Helper()
	if err := w.sub.WaitDelivered(context.Background()); err != nil && !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatal(err)
	}
	select {
	case r := <-w.result:
		t.Fatalf("%s: resolved early: %+v", what, r)
	default:
	}
}

type waitResult struct {
	ev  foldtype.Event
	err error
}

// a waiter resolves from the fresh batch; a type filter waits for a matching type.
// S-01 (docs/engine.md#acceptance-cases).
func TestWaiterResolvesFromFreshBatch(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	any := waitAsync(t, s, "/w", waitOptions{})
	typed := waitAsync(t, s, "/w", waitOptions{types: []string{"done"}})
	mustAppend(t, s, "/w", ev("start"), ev("step"))
	if r := <-any.result; r.err != nil || r.ev.Type != "start" || r.ev.Offset != 1 {
		t.Fatalf("any: got %+v", r)
	}
	typed.pending(t, "typed waiter")
	mustAppend(t, s, "/w", ev("done"))
	if r := <-typed.result; r.err != nil || r.ev.Type != "done" || r.ev.Offset != 3 {
		t.Fatalf("typed: got %+v", r)
	}
}

// an explicit After resolves from history (first match after it, paging as needed); the
// default waits for the next event; an After ahead of the head is not satisfied by an earlier event.
// S-02 (docs/engine.md#acceptance-cases).
func TestWaiterFromHistory(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	in := make([]foldtype.EventInput, 1500)
	for i := range in {
		in[i] = ev("filler")
	}
	in[1200] = ev("needle") // offset 1201: beyond the first page
	mustAppend(t, s, "/w", in...)
	after := int64(10)
	got, err := waitForEvent(ctx, s, "/w", waitOptions{types: []string{"needle"}, after: &after}, nil)
	if err != nil || got.Offset != 1201 {
		t.Fatalf("from history: got %+v, %v; want needle@1201", got, err)
	}
	next := waitAsync(t, s, "/w", waitOptions{})
	mustAppend(t, s, "/w", ev("fresh"))
	if r := <-next.result; r.ev.Offset != 1501 {
		t.Fatalf("default waiter: got %+v, want the next event @1501", r)
	}
	ahead := int64(1503)
	far := waitAsync(t, s, "/w", waitOptions{after: &ahead})
	mustAppend(t, s, "/w", ev("x"), ev("x")) // 1502, 1503: not after 1503
	far.pending(t, "a waiter ahead of the head, after earlier events")
	mustAppend(t, s, "/w", ev("y"))
	if r := <-far.result; r.ev.Offset != 1504 {
		t.Fatalf("ahead waiter: got %+v, want @1504", r)
	}
}

// a timeout writes nothing; an ephemeral resolves a waiter; one event resolves several
// waiters; a re-append made in response to a waiter cannot outrun the commit that woke it.
// S-03 (docs/engine.md#acceptance-cases).
func TestWaiterTimeoutEphemeralAndOrder(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := waitForEvent(ctx, s, "/w", waitOptions{timeout: 5 * time.Second}, nil)
		done <- err
	}()
	clk.WaitArmed(t, testT.Add(5*time.Second))
	sp := s.savepoints()
	clk.Advance(5 * time.Second)
	if err := <-done; !errors.Is(err, foldtype.ErrWaitTimeout) {
		t.Fatalf("timeout: got %v, want WAIT_TIMEOUT", err)
	}
	if s.savepoints() != sp || countRows(t, s, `SELECT count(*) FROM streams`) != 0 {
		t.Fatal("a timed-out waiter wrote something")
	}
	mustCreate(t, s, CreateRequest{Path: "/w", ContentType: EventContentType}) // an ephemeral alone creates no stream

	w1 := waitAsync(t, s, "/w", waitOptions{types: []string{"chunk"}})
	w2 := waitAsync(t, s, "/w", waitOptions{types: []string{"chunk"}})
	mustAppend(t, s, "/w", eph("chunk"))
	for _, w := range []waiter{w1, w2} {
		if r := <-w.result; r.err != nil || r.ev.Offset != 1 || !r.ev.Ephemeral {
			t.Fatalf("ephemeral waiter: got %+v", r)
		}
	}

	// A subscriber sees the outer commit before the re-append a waiter made in response.
	var rec recorder
	sub := subscribe(t, s, "/w", &rec, SubscribeOptions{})
	w3 := waitAsync(t, s, "/w", waitOptions{types: []string{"outer"}})
	reply := make(chan error, 1)
	go func() {
		r := <-w3.result
		_, err := s.Events().Stream("/w").Append(ctx, ev("inner"))
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
