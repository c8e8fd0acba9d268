package stream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

type push struct {
	r      foldtype.ScannedRange
	events []string
}

func (p push) String() string { return fmt.Sprintf("(%d,%d]%v", p.r.After, p.r.Through, p.events) }

// recorder is a subscriber that records pushes and can be held.
type recorder struct {
	mu      sync.Mutex
	pushes  []push
	hold    chan struct{} // when non-nil, each delivery waits for a receive... a close releases all
	entered chan struct{}
}

func (r *recorder) deliver(ctx context.Context, evs []foldtype.Event, rg foldtype.ScannedRange) error {
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.hold != nil {
		<-r.hold
	}
	p := push{r: rg}
	for _, e := range evs {
		p.events = append(p.events, fmt.Sprintf("%s@%d", e.Type, e.Offset))
	}
	r.mu.Lock()
	r.pushes = append(r.pushes, p)
	r.mu.Unlock()
	return nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.pushes))
	for i, p := range r.pushes {
		out[i] = p.String()
	}
	return out
}

func subscribe(t *testing.T, s *Store, path string, r *recorder, opts SubscribeOptions) *Subscription {
	t.Helper()
	sub, err := s.Events().Subscribe(path, r.deliver, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// Ranges chain contiguously per subscriber: a skipped commit's span rides inside the next range,
// only consumed events are pushed, and ephemerals only when named.
func TestSubscriptionRangesChain(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	var ticks, all, star recorder
	subT := subscribe(t, s, "/a", &ticks, SubscribeOptions{Consumes: []string{"tick", "chunk"}})
	subA := subscribe(t, s, "/a", &all, SubscribeOptions{})
	subS := subscribe(t, s, "/a", &star, SubscribeOptions{Consumes: []string{"*"}})
	steps := [][]foldtype.EventInput{
		{ev("tick")},                // 1
		{ev("noise")},               // 2
		{ev("noise"), eph("chunk")}, // 3, 4
		{eph("other")},              // 5
		{ev("tick"), ev("noise")},   // 6, 7
	}
	for _, in := range steps {
		mustAppend(t, s, "/a", in...)
		for _, sub := range []*Subscription{subT, subA, subS} {
			if err := sub.WaitDelivered(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := ticks.got(), []string{"(0,1][tick@1]", "(1,4][chunk@4]", "(4,7][tick@6]"}; !slices.Equal(got, want) {
		t.Errorf("tick,chunk subscriber:\n got %v\nwant %v", got, want)
	}
	want := []string{"(0,1][tick@1]", "(1,2][noise@2]", "(2,4][noise@3]", "(4,7][tick@6 noise@7]"}
	if got := all.got(); !slices.Equal(got, want) {
		t.Errorf("nil-consumes subscriber:\n got %v\nwant %v", got, want)
	}
	if got := star.got(); !slices.Equal(got, want) {
		t.Errorf("* subscriber:\n got %v\nwant %v", got, want)
	}
}

// Pushes queued while one is in flight fold into one push whose range spans them.
func TestSubscriptionFoldsPending(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	r := &recorder{hold: make(chan struct{}), entered: make(chan struct{}, 10)}
	sub := subscribe(t, s, "/a", r, SubscribeOptions{Consumes: []string{"t"}})
	mustAppend(t, s, "/a", ev("t")) // 1: in flight, held
	<-r.entered
	mustAppend(t, s, "/a", ev("t"))
	mustAppend(t, s, "/a", ev("x"))
	mustAppend(t, s, "/a", ev("t"), ev("t"))
	close(r.hold)
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := r.got(), []string{"(0,1][t@1]", "(1,5][t@2 t@4 t@5]"}; !slices.Equal(got, want) {
		t.Fatalf("folded:\n got %v\nwant %v", got, want)
	}
}

// Overflow drops the oldest pending events and moves the range's After past them, so the receiver
// sees a gap it heals from the log.
func TestSubscriptionOverflowDropsOldest(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	r := &recorder{hold: make(chan struct{}), entered: make(chan struct{}, 10)}
	sub := subscribe(t, s, "/a", r, SubscribeOptions{Consumes: []string{"t"}, MaxPendingEvents: 2})
	mustAppend(t, s, "/a", ev("t")) // 1, held
	<-r.entered
	for range 4 {
		mustAppend(t, s, "/a", ev("t")) // 2..5
	}
	close(r.hold)
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := r.got(), []string{"(0,1][t@1]", "(3,5][t@4 t@5]"}; !slices.Equal(got, want) {
		t.Fatalf("overflow:\n got %v\nwant %v", got, want)
	}
	if sub.Dropped() != 2 {
		t.Fatalf("dropped: got %d, want 2", sub.Dropped())
	}
}

// A subscriber that appends from inside its own delivery does not deadlock the writer (pushes are
// fire-and-forget), and Close stops further pushes.
func TestSubscriptionReentrantAppendAndClose(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var seen []int64
	var sub *Subscription
	sub, err := s.Events().Subscribe("/a", func(ctx context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
		for _, e := range evs {
			mu.Lock()
			seen = append(seen, e.Offset)
			mu.Unlock()
			if e.Type == "ping" {
				if _, err := s.Events().Stream("/a").Append(ctx, foldtype.EventInput{Type: "pong", IdempotencyKey: "once"}); err != nil {
					return err
				}
			}
		}
		return nil
	}, SubscribeOptions{Consumes: []string{"ping", "pong"}})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/a", ev("ping"))
	if err := sub.WaitDelivered(ctx); err != nil { // the ping push, which queued the pong push
		t.Fatal(err)
	}
	if err := sub.WaitDelivered(ctx); err != nil { // the pong push
		t.Fatal(err)
	}
	sub.Close()
	mustAppend(t, s, "/a", ev("ping"))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int64{1, 2}) {
		t.Fatalf("seen: got %v, want [1 2]", seen)
	}
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatalf("WaitDelivered after Close with nothing owed: %v", err)
	}
}
