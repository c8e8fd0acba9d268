package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

// bouncer consumes in and emits out for each event, in a blocker with that event's idempotency key.
type bouncer struct {
	foldstream.Base[countState]
	out string
}

func newBouncer(t *testing.T, slug, in, out string) *bouncer {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{Slug: slug, Version: "1", Consumes: []string{in}, Emits: []string{out}})
	if err != nil {
		t.Fatal(err)
	}
	return &bouncer{Base: foldstream.NewBase(c), out: out}
}

func (p *bouncer) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *bouncer) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	ev := a.Event
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldtype.EventInput{Type: p.out, IdempotencyKey: p.IdempotencyKey("bounce", ev)})
		return err
	})
	return nil
}

// §17.5, §17.6 (docs/engine.md#cause-chains) on the store, SQLite and PostgreSQL: two hosted
// processors that feed each other stop at the loop limit; each emit up to it is committed exactly
// once on the root event's chain, the loop-limit fact once, and both processors reach the head.
func TestHostedProcessorsThatFeedEachOtherStopAtTheLoopLimit(t *testing.T) {
	const limit = 6
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s := open()
		defer s.Close(context.Background())
		h, err := host.New(s, host.Config{Logger: quietLog, LoopLimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Shutdown(ctx)
		for _, p := range []*bouncer{newBouncer(t, "pinger", "ping", "pong"), newBouncer(t, "ponger", "pong", "ping")} {
			if _, err := host.Register(ctx, h, "/loop", p); err != nil {
				t.Fatal(err)
			}
		}
		commits := make(chan struct{}, 1)
		stop := s.Events().WatchCommits(func(path string) {
			select {
			case commits <- struct{}{}:
			default:
			}
		})
		defer stop()
		got, err := s.Events().Stream("/loop").Append(ctx, foldtype.EventInput{Type: "ping"})
		if err != nil {
			t.Fatal(err)
		}
		root := got[0]
		chain := fmt.Sprintf("/loop@%d", root.Offset)
		var events []foldtype.Event
		for {
			page, err := s.Events().Stream("/loop").Read(ctx, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			events = page.Events
			if n := countType(events, foldtype.LoopLimitType); n > 0 {
				break
			}
			select {
			case <-commits:
			case <-ctx.Done():
				t.Fatalf("no loop-limit fact; log %v", logOf(t, s, "/loop"))
			}
		}
		head := events[len(events)-1].Offset
		for _, slug := range []string{"pinger", "ponger"} {
			if err := h.WaitUntilProcessed(ctx, "/loop", slug, head, 0); err != nil {
				t.Fatalf("%s: %v", slug, err)
			}
		}
		// Settled: read again, nothing more was appended.
		page, err := s.Events().Stream("/loop").Read(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		depths := map[int]int{}
		for _, e := range page.Events {
			if e.Type != "ping" && e.Type != "pong" || e.Offset == root.Offset {
				continue
			}
			if e.Source == nil || e.Source.Cause == nil || e.Source.Cause.Chain != chain || e.Source.Origin != "/loop" {
				t.Fatalf("%s@%d: source %+v", e.Type, e.Offset, e.Source)
			}
			depths[e.Source.Cause.Depth]++
		}
		for d := 1; d <= limit; d++ {
			if depths[d] != 1 {
				t.Errorf("depth %d committed %d times, want once", d, depths[d])
			}
		}
		if len(depths) != limit || countType(page.Events, foldtype.LoopLimitType) != 1 {
			t.Fatalf("depths %v; log %v", depths, logOf(t, s, "/loop"))
		}
	})
}

func countType(evs []foldtype.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}
