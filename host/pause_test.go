package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// S-08: processors keep reducing what landed before the pause — on a running host, and on a
// host started while the stream is paused (its wake record is exempt from the pause).
func TestProcessorsKeepReducingWhatLandedBeforeThePause(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "s.db")
	s := openStore(t, dbPath, nil)
	defer s.Close(context.Background())
	want := func(h *host.Host, slug string, through int64) {
		t.Helper()
		if err := h.WaitUntilProcessed(ctx, "/p", slug, through, 0); err != nil {
			t.Fatalf("%s: %v", slug, err)
		}
		snap, err := h.Snapshot(ctx, "/p", slug)
		if err != nil {
			t.Fatal(err)
		}
		var st seenState
		if err := json.Unmarshal(snap.State, &st); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Seen, []string{"tick@3", "tick@4"}) || snap.Offset < through {
			t.Fatalf("%s: %+v, want both ticks reduced through %d", slug, snap, through)
		}
	}

	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/p", newSeer(t, "running", "tick")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: []byte(`{"reason":"hold"}`)})
	if err != nil {
		t.Fatal(err)
	}
	pause := got[2].Offset
	if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "tick"}); !errors.Is(err, foldtype.ErrStreamPaused) {
		t.Fatalf("append to the paused stream: got %v", err)
	}
	want(h, "running", pause)
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	h2 := newHost(t, s)
	defer h2.Shutdown(ctx)
	if _, err := host.Register(ctx, h2, "/p", newSeer(t, "late", "tick")); err != nil {
		t.Fatalf("register on a paused stream: %v", err)
	}
	want(h2, "late", pause)
}
