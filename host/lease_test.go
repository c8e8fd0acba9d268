package host_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// TestProcessorStatusNamesItsOwnerNodeAndLeaseGeneration: on SQLite too every processor runs
// under a lease (kept in memory), and its status names the node that holds it.
func TestProcessorStatusNamesItsOwnerNodeAndLeaseGeneration(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir()+"/s.db", nil)
	h := newHost(t, s)
	if _, err := host.Register[countState](ctx, h, "/o", newTicker(t, "tick")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/o").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	sts := h.ProcessorsOn(ctx, "/o")
	if len(sts) != 1 || sts[0].Owner != h.NodeID() || !sts[0].Local || sts[0].Generation < 1 {
		t.Fatalf("status %+v, want owner %q (this node) under a lease", sts, h.NodeID())
	}
}

// TestSecondHostOnOneStoreAnswersFromTheCheckpointOfTheOwner: two hosts on one store (one
// process) are two nodes: the second does not run the processor the first holds, and its
// snapshot, answered from the checkpoint, has read-your-writes.
func TestSecondHostOnOneStoreAnswersFromTheCheckpointOfTheOwner(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir()+"/s.db", nil)
	a := newHost(t, s)
	b, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true}) // one alarm loop per store
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := newTicker(t, "tick"), newTicker(t, "tick")
	if err := host.RegisterPattern[countState](ctx, a, "/t/*", pa); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/t/1").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctx, "/t/1", "tick"); err != nil { // a opens and leases it
		t.Fatal(err)
	}
	if err := host.RegisterPattern[countState](ctx, b, "/t/*", pb); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Events().Stream("/t/1").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := b.Snapshot(ctx, "/t/1", "tick")
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, snap.State); st.Ticks != 4 {
		t.Fatalf("snapshot through the other host: %+v, want 4 ticks", st)
	}
	if n := len(pb.gotEffects()); n != 0 {
		t.Fatalf("the host that does not hold the lease ran %d effects", n)
	}
	sts := b.ProcessorsOn(ctx, "/t/1")
	if len(sts) != 1 || sts[0].Owner != a.NodeID() || sts[0].Local {
		t.Fatalf("status on the other host: %+v, want owner %q", sts, a.NodeID())
	}
}
