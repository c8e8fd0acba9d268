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

// A stream deleted and created again starts its processors afresh: the registration stays, the
// contract's initial state at offset 0 is the start, and the new events' effects run — for an
// exact-path registration and for a pattern's.
func TestDeletedStreamRestartsItsProcessors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	p := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h, "/d", p); err != nil {
		t.Fatal(err)
	}
	c := newCarts(t, "carts")
	if err := host.RegisterPattern(ctx, h, "/carts/*", c); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.Events().Stream("/d").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil { // 3..6
			t.Fatal(err)
		}
	}
	if _, err := s.Events().Stream("/carts/x").Append(ctx, item(2), item(3)); err != nil { // 1, 2
		t.Fatal(err)
	}
	if st := state(t, mustSnapshot(t, h, "/d", "ticker").State); st.Ticks != 4 {
		t.Fatalf("ticks before the delete: got %d, want 4", st.Ticks)
	}
	if got := cartItems(t, h, "/carts/x"); got != 5 {
		t.Fatalf("items before the delete: got %d, want 5", got)
	}

	for _, path := range []string{"/d", "/carts/x"} {
		if err := s.Protocol().DeleteStream(ctx, path); err != nil {
			t.Fatal(err)
		}
	}
	effectsBefore := len(p.gotEffects())
	if _, err := s.Events().Stream("/d").Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "tick"}); err != nil { // 1, 2
		t.Fatal(err)
	}
	cartDone := c.expect("/carts/x", 3)
	if _, err := s.Events().Stream("/carts/x").Append(ctx, item(7)); err != nil { // 1
		t.Fatal(err)
	}
	snap := mustSnapshot(t, h, "/d", "ticker")
	if st := state(t, snap.State); st.Ticks != 2 || !slices.Equal(st.Offsets, []int64{1, 2}) {
		t.Fatalf("after the path was created again: got %d ticks at %v, want 2 at [1 2]", st.Ticks, st.Offsets)
	}
	if got := p.gotEffects()[effectsBefore:]; !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("effects on the new stream: got %v, want [1 2]", got)
	}
	<-cartDone
	if got := cartItems(t, h, "/carts/x"); got != 7 {
		t.Fatalf("items after the path was created again: got %d, want 7", got)
	}
	if got := c.effectsOn("/carts/x"); !slices.Equal(got, []int64{1, 2, 1}) {
		t.Fatalf("cart effects: got %v, want [1 2 1] (the old stream's two, the new one's one)", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustSnapshot(t *testing.T, h *host.Host, path, slug string) foldtype.Snapshot[json.RawMessage] {
	t.Helper()
	snap, err := h.Snapshot(context.Background(), path, slug)
	if err != nil {
		t.Fatalf("snapshot of %s on %s: %v", slug, path, err)
	}
	return snap
}

// The same across a restart: a stream deleted and created again while no host ran starts its
// processor from the initial state when the next host registers it.
func TestDeletedStreamRestartsItsProcessorsAfterARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "d.db")
	s := openStore(t, file, nil)
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/d", newTicker(t, "ticker")); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.Events().Stream("/d").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	if st := state(t, mustSnapshot(t, h, "/d", "ticker").State); st.Ticks != 4 {
		t.Fatalf("ticks: got %d, want 4", st.Ticks)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Protocol().DeleteStream(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/d").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil { // 1
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, file, nil)
	defer s2.Close(context.Background())
	h2 := newHost(t, s2)
	p := newTicker(t, "ticker")
	if _, err := host.Register(ctx, h2, "/d", p); err != nil {
		t.Fatal(err)
	}
	if st := state(t, mustSnapshot(t, h2, "/d", "ticker").State); st.Ticks != 1 || !slices.Equal(st.Offsets, []int64{1}) {
		t.Fatalf("after a restart: got %d ticks at %v, want 1 at [1]", st.Ticks, st.Offsets)
	}
	if got := p.gotEffects(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("effects: got %v, want [1]", got)
	}
	if err := h2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
