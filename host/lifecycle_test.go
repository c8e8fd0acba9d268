package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// storeKind opens a store of one kind; every call opens the same database again (a restart).
type storeKind struct {
	name string
	open func(t *testing.T, clk foldtype.Clock) func() *stream.Store
}

// storeKinds are SQLite (a file) and PostgreSQL (a private schema; skipped outside CI without
// FOLDSTREAM_TEST_POSTGRES, failed under CI).
var storeKinds = []storeKind{
	{"sqlite", func(t *testing.T, clk foldtype.Clock) func() *stream.Store {
		file := filepath.Join(t.TempDir(), "h.db")
		return func() *stream.Store { return openStore(t, file, clk) }
	}},
	{"postgres", func(t *testing.T, clk foldtype.Clock) func() *stream.Store {
		url := pgtest.URL(t)
		return func() *stream.Store { return openStore(t, url, clk) }
	}},
}

// eachStore runs fn on SQLite and on PostgreSQL.
func eachStore(t *testing.T, fn func(t *testing.T, open func() *stream.Store)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			fn(t, k.open(t, nil))
		})
	}
}

// logOf returns the durable records of path as type@offset.
func logOf(t *testing.T, s *stream.Store, path string) []string {
	t.Helper()
	page, err := s.Events().Stream(path).Read(context.Background(), 0, 1000)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var out []string
	for _, e := range page.Events {
		out = append(out, fmt.Sprintf("%s@%d", e.Type, e.Offset))
	}
	return out
}

// closeWith appends one tick over the protocol with Stream-Closed, creating the stream when
// missing (the first POST closes it).
func closeWith(t *testing.T, s *stream.Store, path string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Events().HeadStream(ctx, path); err != nil {
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: path, ContentType: "application/json",
			Body: []byte(`[{"type":"tick"}]`), Closed: true}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: path, ContentType: "application/json",
		Body: []byte(`{"type":"tick"}`), Close: true}); err != nil {
		t.Fatal(err)
	}
}

// ticksOf reads the ticker's snapshot on path.
func ticksOf(t *testing.T, h *host.Host, path string) foldtype.Snapshot[json.RawMessage] {
	t.Helper()
	snap, err := h.Snapshot(context.Background(), path, "ticker")
	if err != nil {
		t.Fatalf("snapshot of %s: %v", path, err)
	}
	return snap
}

// Closing a stream when its entity is done is the normal lifecycle: its processors reduce it,
// answer reads, and do so again after a restart — including a stream closed by its very first
// write — and the host appends nothing to a closed stream (docs/store.md#wake-records).
func TestProcessorsRunOnClosedStreams(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		h := newHost(t, s)
		if err := host.RegisterPattern(ctx, h, "/counters/*", newTicker(t, "ticker")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Events().Stream("/counters/a").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		closeWith(t, s, "/counters/a") // the second tick closes it
		closeWith(t, s, "/counters/b") // the first write closes it
		for _, path := range []string{"/counters/a", "/counters/b"} {
			if !waitTicks(t, h, path) {
				t.Fatalf("%s: the processor never reduced the closed stream", path)
			}
		}
		check := func(when string) {
			t.Helper()
			if snap := ticksOf(t, h, "/counters/a"); state(t, snap.State).Ticks != 2 {
				t.Fatalf("%s: /counters/a ticks %s, want 2", when, snap.State)
			}
			if snap := ticksOf(t, h, "/counters/b"); state(t, snap.State).Ticks != 1 || snap.Offset == 0 {
				t.Fatalf("%s: /counters/b snapshot %d %s, want 1 tick", when, snap.Offset, snap.State)
			}
		}
		check("first run")
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		wantA, wantB := logOf(t, s, "/counters/a"), logOf(t, s, "/counters/b")
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		s = open()
		defer s.Close(context.Background())
		h = newHost(t, s)
		if err := host.RegisterPattern(ctx, h, "/counters/*", newTicker(t, "ticker")); err != nil {
			t.Fatal(err)
		}
		check("after a restart")
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if got := logOf(t, s, "/counters/a"); !slices.Equal(got, wantA) || slices.Contains(got, foldtype.WokenType+"@3") {
			t.Fatalf("/counters/a log after a restart: %v, want %v", got, wantA)
		}
		if got := logOf(t, s, "/counters/b"); !slices.Equal(got, []string{"tick@1"}) {
			t.Fatalf("/counters/b log: %v (first run %v), want only the writer's tick", got, wantB)
		}
	})
}

// waitTicks waits (on the processor, not the clock) until path's ticker reduced the stream's
// last record, reporting whether it did within the host's MaxWait.
func waitTicks(t *testing.T, h *host.Host, path string) bool {
	t.Helper()
	info, err := h.Store().Events().HeadStream(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	err = h.WaitUntilProcessed(context.Background(), path, "ticker", info.Tail, 5*time.Second)
	if err != nil {
		t.Logf("wait on %s: %v", path, err)
	}
	return err == nil
}

// A read never writes: asking a processor for its state — after a restart, and after its engine
// was closed for idleness — appends nothing to the stream.
func TestReadsAppendNothing(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		if _, err := s.Events().Stream("/counters/r").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		h := newHost(t, s)
		if err := host.RegisterPattern(ctx, h, "/counters/*", newTicker(t, "ticker")); err != nil {
			t.Fatal(err)
		}
		if !waitTicks(t, h, "/counters/r") {
			t.Fatal("the processor never reduced the stream")
		}
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		before := logOf(t, s, "/counters/r")
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		clk := testsupport.NewFakeClock()
		s = openStore(t, s.Path(), clk)
		defer s.Close(context.Background())
		h, err := host.New(s, host.Config{Logger: quietLog, IdleTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := host.RegisterPattern(ctx, h, "/counters/*", newTicker(t, "ticker")); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if st := state(t, ticksOf(t, h, "/counters/r").State); st.Ticks != 1 {
				t.Fatalf("read %d: ticks %d, want 1", i, st.Ticks)
			}
			if _, err := h.LiveSnapshot(ctx, "/counters/r", "ticker"); err != nil {
				t.Fatal(err)
			}
			if got := logOf(t, s, "/counters/r"); !slices.Equal(got, before) {
				t.Fatalf("read %d wrote to the stream: log %v, want %v", i, got, before)
			}
			// Close the idle engine: the next read opens it again.
			waitClosed(t, h, clk, "/counters/r")
		}
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// waitClosed advances clk until the host closed the engine of ticker on path for idleness.
func waitClosed(t *testing.T, h *host.Host, clk *testsupport.FakeClock, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := h.ProcessorsOn(context.Background(), path)
		if len(ps) == 1 && !ps[0].Open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine on %s never closed: %+v", path, ps)
		}
		clk.Advance(time.Minute)
		runtime.Gosched()
	}
}

// Deleted stays deleted: twenty streams under a pattern whose processor projects live state are
// deleted while their engines work; none comes back (no live-state delta, wake record or emitted
// event recreates a path), and only a writer's append brings one back.
func TestDeletedStreamsStayDeleted(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		defer s.Close(context.Background())
		h := newHost(t, s)
		c := newCarts(t, "carts")
		if err := host.RegisterPattern(ctx, h, "/carts/*", c); err != nil {
			t.Fatal(err)
		}
		const n = 20
		for round := range 5 {
			for i := range n {
				path := fmt.Sprintf("/carts/%02d", i)
				if _, err := s.Events().Stream(path).Append(ctx, item(1), item(2)); err != nil {
					t.Fatal(err)
				}
				if round%2 == 0 {
					_ = cartItems(t, h, path) // the engine is open and its deltas on their way
				}
				if _, err := s.Events().Stream(path).Append(ctx, item(3)); err != nil {
					t.Fatal(err)
				}
				if err := s.Protocol().DeleteStream(ctx, path); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := h.Shutdown(ctx); err != nil { // every late engine has finished by now
			t.Fatal(err)
		}
		left, err := s.Events().ListStreams(ctx, stream.ListOptions{Prefix: "/carts/"})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			var paths []string
			for _, info := range left {
				paths = append(paths, fmt.Sprintf("%s %v", info.Path, logOf(t, s, info.Path)))
			}
			t.Fatalf("deleted streams came back: %v", paths)
		}
		// An ephemeral append (a live-state delta) to a missing stream is dropped.
		if _, err := s.Events().Stream("/carts/00").Append(ctx, foldtype.EventInput{Type: foldtype.LiveStateChangedType, Ephemeral: true,
			Payload: foldtype.JSON(map[string]any{"from": 0})}); err != nil {
			t.Fatalf("ephemeral append to a missing stream: %v, want it dropped", err)
		}
		if _, err := s.Events().HeadStream(ctx, "/carts/00"); err == nil {
			t.Fatal("an ephemeral append created the stream")
		}
		// A processor's own append (a late engine) does not create it either.
		if _, err := s.Events().Stream("/carts/00").ForProcessor("carts").Append(ctx, item(1)); !errors.Is(err, foldtype.ErrStreamNotFound) {
			t.Fatalf("a processor's append to a deleted stream: %v, want STREAM_NOT_FOUND", err)
		}
		if _, err := s.Events().WakeExisting(ctx, "/carts/00", stream.WakeRequest); !errors.Is(err, foldtype.ErrStreamNotFound) {
			t.Fatalf("waking a deleted stream: %v, want STREAM_NOT_FOUND", err)
		}
		if _, err := s.Events().HeadStream(ctx, "/carts/00"); err == nil {
			t.Fatal("a processor's append or a wake created the stream")
		}
		// A writer's append creates it.
		if _, err := s.Events().Stream("/carts/00").Append(ctx, item(5)); err != nil {
			t.Fatal(err)
		}
		if got := logOf(t, s, "/carts/00"); !slices.Equal(got, []string{"item@1"}) {
			t.Fatalf("the re-created stream: %v, want [item@1]", got)
		}
	})
}

// RefuseInvalidEvents: an event whose payload breaks the schema of a processor registered with it
// on that stream is refused at append time (INVALID_EVENT with the schema error), through the event
// view and over the protocol, and nothing lands; streams it does not cover, and registrations
// without it, take the event as before.
func TestRefuseInvalidEventsAtAppendTime(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		defer s.Close(context.Background())
		h := newHost(t, s)
		if err := host.RegisterPattern(ctx, h, "/carts/*", newCarts(t, "carts"), host.RefuseInvalidEvents()); err != nil {
			t.Fatal(err)
		}
		if err := host.RegisterPattern(ctx, h, "/loose/*", newCarts(t, "carts")); err != nil {
			t.Fatal(err)
		}
		bad := foldtype.EventInput{Type: "item", Payload: foldtype.JSON(map[string]any{"n": "three"})}
		if _, err := s.Events().Stream("/carts/a").Append(ctx, item(1)); err != nil {
			t.Fatal(err)
		}
		_ = cartItems(t, h, "/carts/a") // the engine opened (and woke the stream)
		before := logOf(t, s, "/carts/a")
		var fe *foldtype.Error
		if _, err := s.Events().Stream("/carts/a").Append(ctx, item(2), bad); !errors.As(err, &fe) || fe.Code != foldtype.CodeInvalidEvent || !strings.Contains(fe.Message, "schema") {
			t.Fatalf("append of a bad payload: %v, want INVALID_EVENT with the schema error", err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/carts/a", ContentType: "application/json",
			Body: []byte(`[{"type":"item","payload":{"n":1}},{"type":"item","payload":{"n":"three"}}]`)}); !errors.Is(err, foldtype.ErrInvalidEvent) {
			t.Fatalf("protocol append of a bad payload: %v, want INVALID_EVENT", err)
		}
		if _, err := s.Events().Stream("/carts/new").Append(ctx, bad); !errors.Is(err, foldtype.ErrInvalidEvent) {
			t.Fatalf("append of a bad payload to a new stream: %v, want INVALID_EVENT", err)
		}
		if got := logOf(t, s, "/carts/a"); !slices.Equal(got, before) {
			t.Fatalf("log after refused appends: %v, want %v", got, before)
		}
		if _, err := s.Events().HeadStream(ctx, "/carts/new"); err == nil {
			t.Fatal("a refused append created its stream")
		}
		for _, path := range []string{"/loose/a", "/other/a"} {
			if _, err := s.Events().Stream(path).Append(ctx, bad); err != nil {
				t.Fatalf("%s: %v, want the event stored (no refusing registration there)", path, err)
			}
		}
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Events().Stream("/carts/b").Append(ctx, bad); err != nil {
			t.Fatalf("after the host stopped: %v, want no check any more", err)
		}
	})
}
