package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

func TestUpsertKeepsStateOnCursorOnlyWrites(t *testing.T) {
	t.Parallel()
	cps := testsupport.MemoryCheckpoints()
	ctx := context.Background()
	if _, ok := cps.Get("p"); ok {
		t.Fatal("row before any write")
	}
	mustDo(t, cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 3, State: json.RawMessage(`{"n":1}`)}, true))
	mustDo(t, cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 5, State: json.RawMessage(`{"n":99}`)}, false))
	cp, _ := cps.Get("p")
	eq(t, "row", []any{cp.ReducerVersion, cp.ReducedThroughOffset, string(cp.State)}, []any{"1", int64(5), `{"n":1}`})
	mustDo(t, cps.WriteCheckpoint(ctx, "q", foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 4}, false))
	cp, _ = cps.Get("q")
	if cp.State != nil {
		t.Errorf("NULL state read back as %q", cp.State)
	}
	eq(t, "writes", cps.Writes(), 3)
}

func TestScopesAndOptions(t *testing.T) {
	t.Parallel()
	db := testsupport.MemoryCheckpoints().DB()
	ctx := context.Background()
	a := must[*foldstream.CheckpointTable](t)(foldstream.NewCheckpointTable(ctx, db, foldstream.CheckpointTableConfig{Scope: "/a"}))
	b := must[*foldstream.CheckpointTable](t)(foldstream.NewCheckpointTable(ctx, db, foldstream.CheckpointTableConfig{Scope: "/b", SkipCreate: true}))
	mustDo(t, a.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 1}, false))
	if _, ok, _ := b.ReadCheckpoint(ctx, "p"); ok {
		t.Error("scope /b sees scope /a's row")
	}
	if _, err := foldstream.NewCheckpointTable(ctx, db, foldstream.CheckpointTableConfig{Table: "x; DROP TABLE y"}); err == nil {
		t.Error("an unsafe table name was accepted")
	}
}

func TestCeilingRefusesBeforeWriting(t *testing.T) {
	t.Parallel()
	cps := testsupport.MemoryCheckpoints()
	state := foldtype.JSON(map[string]string{"s": strings.Repeat("x", foldtype.MaxCheckpointChars)})
	err := cps.WriteCheckpoint(context.Background(), "big", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 1, State: state}, true)
	want := `checkpoint "big": the reduced state serializes to 2093064 chars, over the 2093056-char ceiling of one storage cell (2 MB) ` +
		"\u2014" + ` a reduce must keep a summary, not the events; nothing was written`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeReduceCheckpointTooLarge || fe.Retryable {
		t.Fatalf("got %#v", err)
	}
	eq(t, "data", fe.Data, map[string]any{"slug": "big", "chars": 2093064, "maxChars": 2093056})
	if _, ok := cps.Get("big"); ok {
		t.Error("something was written")
	}
	// Exactly at the ceiling is accepted.
	at := foldtype.JSON(strings.Repeat("x", foldtype.MaxCheckpointChars-2))
	mustDo(t, cps.WriteCheckpoint(context.Background(), "edge", foldtype.Checkpoint{ReducerVersion: "1", State: at}, true))
}
