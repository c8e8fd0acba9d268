package foldstream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// bouncer consumes in and, for each event, emits out in a blocker with an idempotency key of that
// event: half of two processors that feed each other.
func bouncer(t *testing.T, slug, in, out string) *fn[emptyState] {
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: slug, Version: "1", Consumes: []string{in}, Emits: []string{out}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c)}
	p.process = func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event == nil {
			return nil
		}
		ev := a.Event
		a.BlockProcessorWhile(func(ctx context.Context) error {
			_, err := a.Append(ctx, foldstream.EventInput{Type: out, IdempotencyKey: p.IdempotencyKey("bounce", ev)})
			return err
		})
		return nil
	}
	return p
}

// checkLoop checks a ping-pong log after it stopped: the root event, one emit at each depth 1…limit
// (each exactly once, alternating types, on the root's chain), and one loop-limit fact.
func checkLoop(t *testing.T, events []foldstream.Event, path string, limit int) {
	t.Helper()
	var root foldstream.Event
	depths := map[int]int{}
	facts := 0
	for _, e := range events {
		switch {
		case e.Type == foldtype.LoopLimitType:
			facts++
			jsonEq(t, "loop-limit fact", e.Payload, `{"chain":"`+path+`@`+itoa64(root.Offset)+`","limit":`+itoa64(int64(limit))+`}`)
		case e.Type == "ping" && e.Source == nil:
			root = e
		case e.Type == "ping" || e.Type == "pong":
			c := e.Source.Cause
			if c == nil || c.Chain != path+"@"+itoa64(root.Offset) || e.Source.Origin != path {
				t.Fatalf("event %s@%d: source %+v, cause %+v", e.Type, e.Offset, e.Source, c)
			}
			if want := map[bool]string{true: "pong", false: "ping"}[c.Depth%2 == 1]; e.Type != want {
				t.Errorf("depth %d is %s, want %s", c.Depth, e.Type, want)
			}
			depths[c.Depth]++
		}
	}
	for d := 1; d <= limit; d++ {
		if depths[d] != 1 {
			t.Errorf("depth %d committed %d times, want once", d, depths[d])
		}
	}
	if len(depths) != limit || facts != 1 {
		t.Fatalf("depths %v, loop-limit facts %d; want depths 1…%d and one fact", depths, facts, limit)
	}
}

func itoa64(n int64) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// §17.5, §17.6 (docs/engine.md#cause-chains) on the stand-in: two processors that feed each other
// stop at the loop limit with everything before it committed exactly once, the loop-limit fact
// recorded once, and neither batch failed.
func TestProcessorsThatFeedEachOtherStopAtTheLoopLimit(t *testing.T) {
	t.Parallel()
	const limit = 6
	mem := testsupport.NewMemoryStream()
	rep := &siteLog{}
	var engines []*foldstream.Engine[emptyState]
	for _, p := range []*fn[emptyState]{bouncer(t, "pinger", "ping", "pong"), bouncer(t, "ponger", "pong", "ping")} {
		eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) {
			c.LoopLimit, c.Reporter = limit, rep
		})
		mem.Register(eng)
		engines = append(engines, eng)
	}
	appendT(t, mem, ev("ping"))
	waitUntil(t, "the loop-limit fact", func() bool { return len(mem.EventsOfType(foldtype.LoopLimitType)) == 1 }, mem.Changed)
	settle(t, mem)
	for _, eng := range engines {
		drain(t, eng)
		if got, head := eng.ReducedThroughOffset(), mem.Head(); got != head {
			t.Errorf("%s reduced through %d, head %d: a batch failed", eng.Slug(), got, head)
		}
	}
	checkLoop(t, mem.Events(), "/", limit)
}

// §17.6: an emit past the limit fails with LOOP_LIMIT, data.recorded = true; the default limit is
// DefaultLoopLimit.
func TestEmitPastTheLoopLimitIsARecordedLoopLimit(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "deep", Version: "1", Consumes: []string{"x"}, Emits: []string{"y"}}))
	var got error
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			_, got = a.Append(a.Context(), foldstream.EventInput{Type: "y"})
		}
		return got
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	deep := &foldtype.Source{Cause: &foldtype.Cause{Chain: "/elsewhere@7", Depth: foldstream.DefaultLoopLimit}}
	appendT(t, mem, foldstream.EventInput{Type: "x", Source: deep})
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	var fe *foldstream.Error
	if !errors.As(got, &fe) || fe.Code != foldtype.CodeLoopLimit || fe.Data["recorded"] != true || fe.Data["depth"] != foldstream.DefaultLoopLimit+1 {
		t.Fatalf("emit past the default limit: %v", got)
	}
	if n := len(mem.EventsOfType("y")); n != 0 {
		t.Fatalf("%d events past the limit were appended", n)
	}
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(1)) // the batch of x committed, not failed
}
