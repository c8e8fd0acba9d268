package host_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// Every snapshot straight after an append reflects it (read-your-writes, docs/store.md#reads), with the
// engine fed by the store's subscription.
func TestSnapshotReadsYourWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	p := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h, "/c", p); err != nil {
		t.Fatal(err)
	}
	var want []int64
	for i := range 30 {
		in := []foldtype.EventInput{{Type: "tick"}}
		if i%4 == 0 {
			in = append(in, foldtype.EventInput{Type: "noise"})
		}
		got, err := s.Events().Stream("/c").Append(ctx, in...)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, got[0].Offset)
		snap, err := h.Snapshot(ctx, "/c", "ticker")
		if err != nil {
			t.Fatal(err)
		}
		if st := state(t, snap.State); !slices.Equal(st.Offsets, want) {
			t.Fatalf("after append %d: got %v, want %v", i, st.Offsets, want)
		}
		if snap.Offset < got[len(got)-1].Offset {
			t.Fatalf("after append %d: snapshot offset %d below the append's %d", i, snap.Offset, got[len(got)-1].Offset)
		}
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The birth batch is at 1..2; milestones are emitted once each, idempotently.
	page, err := s.Events().Stream("/c").Read(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	milestones := 0
	for _, e := range page.Events {
		types = append(types, e.Type)
		if e.Type == "milestone" {
			milestones++
			if e.Source == nil || e.Source.Processor == nil || e.Source.Processor.Slug != "ticker" {
				t.Fatalf("milestone source: got %+v", e.Source)
			}
		}
	}
	if types[0] != foldtype.CreatedType || types[1] != foldtype.WokenType {
		t.Fatalf("first records: got %v, want the birth batch", types[:2])
	}
	if milestones != 10 {
		t.Fatalf("milestones: got %d, want 10", milestones)
	}
}

// A host reborn on the same file resumes every processor from its checkpoint: no effect runs
// again, events appended while it was down are processed once, and the new incarnation's wake
// record lands.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "h.db")
	s := openStore(t, file, nil)
	h := newHost(t, s)
	p1 := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h, "/c", p1); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.Events().Stream("/c").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Snapshot(ctx, "/c", "ticker"); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/c").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil { // while no host runs
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, file, nil)
	defer s2.Close(context.Background())
	h2 := newHost(t, s2)
	p2 := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h2, "/c", p2); err != nil {
		t.Fatal(err)
	}
	snap, err := h2.Snapshot(ctx, "/c", "ticker")
	if err != nil {
		t.Fatal(err)
	}
	st := state(t, snap.State)
	if st.Ticks != 5 {
		t.Fatalf("ticks after restart: got %d, want 5", st.Ticks)
	}
	if got, want := p2.gotEffects(), []int64{st.Offsets[4]}; !slices.Equal(got, want) {
		t.Fatalf("effects in the new incarnation: got %v, want only the new tick %v", got, want)
	}
	page, _ := s2.Events().Stream("/c").Read(ctx, 0, 1000)
	woken := 0
	for _, e := range page.Events {
		if e.Type == foldtype.WokenType {
			woken++
		}
	}
	if woken != 2 {
		t.Fatalf("wake records: got %d, want 2 (one per incarnation)", woken)
	}
	if err := h2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// Acceptance case P-25 (docs/engine.md#acceptance-cases).
func TestEphemeralsOnTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/p", newSeer(t, "eph", "loud", "chunk")); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/p", newSeer(t, "star", "*")); err != nil {
		t.Fatal(err)
	}
	seen := func(slug string) []string {
		snap, err := h.Snapshot(ctx, "/p", slug)
		if err != nil {
			t.Fatal(err)
		}
		var st seenState
		json.Unmarshal(snap.State, &st)
		return st.Seen
	}
	s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "loud"})                                                                        // 3
	s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "chunk", Ephemeral: true}, foldtype.EventInput{Type: "chunk", Ephemeral: true}) // 4, 5
	if got, want := seen("eph"), []string{"loud@3", "chunk@4", "chunk@5"}; !slices.Equal(got, want) {
		t.Fatalf("eph: got %v, want %v", got, want)
	}
	if got, want := seen("star"), []string{"events.iterate.com/itx/created@1", "events.iterate.com/itx/woken@2", "loud@3"}; !slices.Equal(got, want) {
		t.Fatalf("star: got %v, want %v", got, want)
	}
	s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "loud"}) // 6
	if got := seen("star"); got[len(got)-1] != "loud@6" {
		t.Fatalf("star after loud: got %v", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOverflowHealsByGapRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, MaxPendingEvents: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := &heldTicker{ticker: newTicker(t, "held"), entered: make(chan struct{}), release: make(chan struct{})}
	if _, err := host.Register(ctx, h, "/o", p); err != nil {
		t.Fatal(err)
	}
	var want []int64
	got, err := s.Events().Stream("/o").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, got[0].Offset)
	<-p.entered // the first push is held inside the engine
	for range 10 {
		got, err := s.Events().Stream("/o").Append(ctx, foldtype.EventInput{Type: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, got[0].Offset)
	}
	close(p.release)
	snap, err := h.Snapshot(ctx, "/o", "held")
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, snap.State); !slices.Equal(st.Offsets, want) {
		t.Fatalf("after overflow: got %v, want %v", st.Offsets, want)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
