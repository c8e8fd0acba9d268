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
// process) are two nodes: one runs the processor at a time (each effect runs once), a snapshot
// through either has read-your-writes, and both name the same owner and lease generation.
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
	// b may have taken the processor over meanwhile (a hands it over when b is preferred for
	// it): each event's effect ran once, on whichever host held the lease.
	seen := map[int64]int{}
	for _, off := range append(pa.gotEffects(), pb.gotEffects()...) {
		seen[off]++
		if seen[off] > 1 {
			t.Fatalf("the effect of offset %d ran on both hosts (a: %v, b: %v)", off, pa.gotEffects(), pb.gotEffects())
		}
	}
	waitFor(t, func() bool {
		sa, sb := a.ProcessorsOn(ctx, "/t/1"), b.ProcessorsOn(ctx, "/t/1")
		return len(sa) == 1 && len(sb) == 1 && sa[0].Owner != "" && sa[0].Owner == sb[0].Owner &&
			sa[0].Generation == sb[0].Generation && sa[0].Local != sb[0].Local
	})
}
