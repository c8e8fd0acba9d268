package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
)

// TestEveryNodeReportsTheOneStateOwnerAndGenerationOfAProcessor: two nodes run one pattern
// processor (on PostgreSQL two stores on one database; on SQLite two hosts on one store). Whichever
// node owns it, both report the same state, owner and lease generation: running once it processed
// an event, failing (with the failure) while its ProcessEvent keeps failing, running again once
// it recovers, and idle once its engine closed with nothing to do.
func TestEveryNodeReportsTheOneStateOwnerAndGenerationOfAProcessor(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var stores [2]*stream.Store
			if kind == "postgres" {
				url := pgtest.URL(t)
				stores[0], stores[1] = openStore(t, url, nil), openStore(t, url, nil)
			} else {
				stores[0] = openStore(t, t.TempDir()+"/s.db", nil)
				stores[1] = stores[0]
			}
			var hosts [2]*host.Host
			procs := [2]*flaky{newFlaky(t), newFlaky(t)}
			for i := range hosts {
				cfg := host.Config{Logger: quietLog, NodeID: fmt.Sprintf("n%d", i), LeaseTTL: time.Second, IdleTimeout: 2 * time.Second}
				cfg.ManualAlarms = kind == "sqlite" && i == 1 // one alarm loop per store
				h, err := host.New(stores[i], cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
				procs[i].broken.Store(false)
				if err := host.RegisterPattern[countState](ctx, h, "/f/*", procs[i]); err != nil {
					t.Fatal(err)
				}
				hosts[i] = h
			}
			const path = "/f/1"
			if _, err := stores[0].Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
				t.Fatal(err)
			}
			// agree waits until both nodes report state with one owner and generation, and
			// returns the owner's status.
			agree := func(state string) foldtype.ProcessorStatus {
				t.Helper()
				// The other node learns it from the owner's next renewal.
				var a, b foldtype.ProcessorStatus
				if !wait.Every(20*time.Second, 20*time.Millisecond, func() bool {
					a, b = statusOf(t, hosts[0], path, "flaky"), statusOf(t, hosts[1], path, "flaky")
					return a.State == state && b.State == state && a.Owner == b.Owner && a.Generation == b.Generation &&
						(state == foldtype.StateIdle || (a.Owner != "" && a.Local != b.Local))
				}) {
					t.Fatalf("the nodes do not agree on %s:\n n0: %+v\n n1: %+v", state, a, b)
				}
				if a.Local {
					return a
				}
				return b
			}
			st := agree(foldtype.StateRunning)
			if st.Generation < 1 || st.Offset < 1 {
				t.Fatalf("running: %+v, want a lease generation and the event's offset", st)
			}
			owner := 0
			if st.Owner == hosts[1].NodeID() {
				owner = 1
			}
			procs[owner].broken.Store(true)
			bad, err := stores[1-owner].Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "bad"})
			if err != nil {
				t.Fatal(err)
			}
			st = agree(foldtype.StateFailing)
			other := statusOf(t, hosts[1-owner], path, "flaky")
			if st.Failing == nil || other.Failing == nil || other.Failing.Offset != bad[0].Offset || other.Failing.Code != st.Failing.Code {
				t.Fatalf("failing: owner %+v, other node %+v, want the failure at offset %d on both", st.Failing, other.Failing, bad[0].Offset)
			}
			procs[owner].broken.Store(false)
			st = agree(foldtype.StateRunning)
			if st.Offset < bad[0].Offset {
				t.Fatalf("recovered: %+v, want it through offset %d", st, bad[0].Offset)
			}
			agree(foldtype.StateIdle) // IdleTimeout closed the engine and released the lease idle
		})
	}
}

// TestAPatternProcessorThatNeverHadWorkIsIdle: a stream a pattern covers whose processor never
// had an event to process reports the processor idle, with no owner; an event makes it running
// on this node.
func TestAPatternProcessorThatNeverHadWorkIsIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir()+"/s.db", nil)
	h := newHost(t, s)
	if err := host.RegisterPattern[countState](ctx, h, "/u/*", newTicker(t, "tick")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/u/1", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, h, "/u/1", "tick"); st.State != foldtype.StateIdle || st.Owner != "" || st.Open {
		t.Fatalf("a processor that never had work: %+v, want idle with no owner", st)
	}
	if _, err := s.Events().Stream("/u/1").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return statusOf(t, h, "/u/1", "tick").State == foldtype.StateRunning })
	if st := statusOf(t, h, "/u/1", "tick"); st.Owner != h.NodeID() || !st.Local || st.Generation < 1 {
		t.Fatalf("running: %+v, want this node as its owner", st)
	}
}
