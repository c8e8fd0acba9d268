package host_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// byTen is the next version of the ticker's "ticks": it counts each tick by ten and runs no effect.
type byTen struct{ foldstream.Base[countState] }

func (byTen) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 10}, true, nil
}

// A rebuild an earlier owner left (its side row, folded part of the way) is resumed by the node
// that runs the processor now, from that row and not from the start, and switched in without
// anyone asking again: the state is the side row's plus the fold of the events after it.
func TestARebuildAnEarlierOwnerLeftIsResumedFromItsRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStore(t, filepath.Join(t.TempDir(), "resume.db"), nil)
	defer s.Close(context.Background())
	ticks := make([]foldtype.EventInput, 6)
	for i := range ticks {
		ticks[i] = foldtype.EventInput{Type: "tick"}
	}
	got, err := s.Events().Stream("/t").Append(ctx, ticks...)
	if err != nil {
		t.Fatal(err)
	}
	// The earlier owner folded the first three ticks into the side row; its state says so
	// (a value no fold from the start gives).
	cps, err := s.Events().Checkpoints(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	side := foldstream.RebuildRow("ticks", "2")
	if err := cps.WriteCheckpoint(ctx, side, foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: got[2].Offset,
		State: json.RawMessage(`{"ticks":1000}`)}, true); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, s)
	defer h.Shutdown(context.Background())
	v1 := newTicker(t, "ticks")
	if _, err := host.Register(ctx, h, "/t", v1); err != nil {
		t.Fatal(err)
	}
	next := byTen{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[countState]{
		Slug: "ticks", Version: "2", Consumes: []string{"tick"}}))}
	if err := host.RegisterNextVersion(ctx, h, "/t", next); err != nil {
		t.Fatal(err)
	}
	if !wait.For(20*time.Second, func() bool {
		for _, st := range h.ProcessorsOn(ctx, "/t") {
			if st.Slug == "ticks" {
				return st.Version == "2"
			}
		}
		return false
	}) {
		t.Fatalf("the left rebuild was not resumed and switched within 20s: %+v", h.ProcessorsOn(ctx, "/t"))
	}
	snap, err := h.Snapshot(ctx, "/t", "ticks")
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, snap.State); st.Ticks != 1030 {
		t.Fatalf("state after the resumed rebuild: %+v, want 1030 ticks (the side row's 1000 and 3 ticks by ten)", st)
	}
	if _, ok, _ := cps.ReadCheckpoint(ctx, side); ok {
		t.Fatal("the side row is still there after the switch")
	}
	wantEachOnce(t, "v1's effects", v1.gotEffects(), offsetsOf(got))
	if _, err := h.Rebuild(ctx, "/t", "other"); err == nil {
		t.Fatal("rebuild of a processor not registered: got nil")
	}
}

func offsetsOf(evs []foldtype.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Offset
	}
	return out
}
