package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// TestEngineOpeningReadsTheStreamItsCheckpointsAndTheEventsAfterTheCheckpoint: the opening read,
// in a read transaction and (for work, on SQLite) in the writer, answers the stream, the
// checkpoint rows found and the page after the offset the rows give, and a missing stream is
// STREAM_NOT_FOUND.
func TestEngineOpeningReadsTheStreamItsCheckpointsAndTheEventsAfterTheCheckpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		head func(*Events) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error)
	}{
		{"read", func(e *Events) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error) {
			return e.HeadStreamForEngine
		}},
		{"work", func(e *Events) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error) {
			return e.HeadStreamForWork
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testEngineOpening(t, c.head)
		})
	}
}

func testEngineOpening(t *testing.T, headOf func(*Events) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error)) {
	s, _ := setupFile(t)
	head := headOf(s.Events())
	ctx := context.Background()
	mustAppend(t, s, "/a", ev("x"), ev("x"), ev("x"))
	cps, err := s.Events().Checkpoints(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 2, State: []byte(`{"n":2}`)}, true); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/a", ev("y"), ev("z"))
	var gave map[string]foldtype.Checkpoint
	o, err := head(ctx, "/a", []string{"p", "p:marker"}, func(rows map[string]foldtype.Checkpoint) int64 {
		gave = rows
		return rows["p"].ReducedThroughOffset
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if o.Info.Path != "/a" || o.Info.Tail != 5 {
		t.Fatalf("info: got path %q tail %d, want /a at 5", o.Info.Path, o.Info.Tail)
	}
	cp, ok := o.Checkpoints["p"]
	if len(o.Checkpoints) != 1 || !ok || cp.ReducedThroughOffset != 2 || string(cp.State) != `{"n":2}` {
		t.Fatalf("checkpoints: got %+v, want only p at 2 with its state", o.Checkpoints)
	}
	if len(gave) != 1 {
		t.Fatalf("after was given %+v, want the rows found", gave)
	}
	if !o.HasPage || o.After != 2 {
		t.Fatalf("page: has %v after %d, want a page after 2", o.HasPage, o.After)
	}
	var types []string
	for _, e := range o.Page.Events {
		types = append(types, e.Type)
	}
	if len(types) != 2 || types[0] != "x" || types[1] != "y" || o.Page.Events[0].Offset != 3 || o.Page.AtHead {
		t.Fatalf("page: got %v (first at %d, at head %v), want [x y] from offset 3, limited to 2, not at head",
			types, o.Page.Events[0].Offset, o.Page.AtHead)
	}

	if o, err := head(ctx, "/a", []string{"p"}, func(map[string]foldtype.Checkpoint) int64 { return -1 }, 10); err != nil || o.HasPage {
		t.Fatalf("after -1: got page %v, err %v; want no page", o.HasPage, err)
	}
	if _, err := head(ctx, "/missing", []string{"p"}, nil, 0); kindOf(err) != foldtype.CodeStreamNotFound {
		t.Fatalf("missing stream: got %v, want STREAM_NOT_FOUND", err)
	}
}
