package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream"
)

// A node that takes over a pattern processor whose checkpoint covers its stream — here the node
// restarted after a clean shutdown, which released the lease for a takeover — settles it idle:
// no engine opens and nothing is written to the stream (no wake record). The next append opens
// the engine on that node, and the processor reacts to it.
func TestACaughtUpProcessorTakenOverIsSettledIdleAndWritesNothing(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	contract, err := foldstream.DefineContract(foldstream.ContractConfig[cart]{Slug: "reactor", Version: "1", Consumes: []string{"r"}})
	if err != nil {
		t.Fatal(err)
	}
	log := newReactions()
	start := func(name string) (*stream.Store, *host.Host) {
		s := openStore(t, url, nil)
		h, err := host.New(s, host.Config{Logger: quietLog, NodeID: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = h.Shutdown(context.Background())
			_ = s.Close(context.Background())
		})
		if err := host.RegisterPattern[cart](ctx, h, "/r/*", &reactor{Base: foldstream.NewBase(contract), log: log}); err != nil {
			t.Fatal(err)
		}
		return s, h
	}
	appendAndWait := func(s *stream.Store) {
		t.Helper()
		evs, err := s.Events().Stream("/r/1").Append(ctx, foldtype.EventInput{Type: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := log.wait(fmt.Sprintf("/r/1@%d", evs[0].Offset), 30*time.Second); !ok {
			t.Fatalf("no ProcessEvent of /r/1@%d", evs[0].Offset)
		}
	}
	sa, ha := start("a")
	appendAndWait(sa)
	if err := ha.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := sa.Events().HeadStream(ctx, "/r/1")
	if err != nil {
		t.Fatal(err)
	}

	sb, hb := start("b")
	// The lease waits for a taker until b's first scans: wait until b took it and either settled
	// it (idle) or opened its engine.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for st := statusOf(t, hb, "/r/1", "reactor"); st.State != foldtype.StateIdle && !st.Open; st = statusOf(t, hb, "/r/1", "reactor") {
		select {
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("the restarted node never took the processor over: %+v", st)
		}
	}
	// An engine it opened instead would append the wake record: give it the time to show.
	for st := statusOf(t, hb, "/r/1", "reactor"); st.Open && st.Offset < before.Tail+1; st = statusOf(t, hb, "/r/1", "reactor") {
		select {
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("the engine opened at takeover never caught up: %+v", st)
		}
	}
	after, err := sb.Events().HeadStream(ctx, "/r/1")
	if err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, hb, "/r/1", "reactor"); after.Tail != before.Tail || st.State != foldtype.StateIdle || st.Open {
		t.Fatalf("after the takeover: tail %d → %d, status %+v; want the tail unchanged and the processor idle, not open",
			before.Tail, after.Tail, st)
	}
	appendAndWait(sb)
	if st := statusOf(t, hb, "/r/1", "reactor"); st.Owner != "b" {
		t.Fatalf("after an append: %+v, want it running on b", st)
	}
}
