package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/testsupport"
)

// A create of a path the writer holds nothing of inserts without reading the path first
// (driver.FreshStreamInserter). When a row holds the path after all — a stream evicted from the
// writer's cache, a soft-deleted source its forks still read, an expired stream — the create is
// decided by that row exactly as before: the same answer, the same stream.
func TestCreateOfAPathNotInMemoryIsDecidedByItsRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s, err := openStore(":memory:", Config{Clock: clk, Logger: quietLog, ProducerReorderWait: -1, MaxCachedStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	json := "application/json"
	evict := evictor(t, s)

	// A fresh path: created; the same create again answers the existing stream.
	if res := mustCreate(t, s, CreateRequest{Path: "/fresh", ContentType: json}); !res.Created {
		t.Fatalf("fresh create: %+v, want created", res)
	}
	if res := mustCreate(t, s, CreateRequest{Path: "/fresh", ContentType: json}); res.Created {
		t.Fatalf("second create: %+v, want the existing stream", res)
	}

	// An existing stream with messages, evicted: the same configuration answers it (not
	// created, its tail kept), another configuration is a conflict, a refused request is
	// refused as before.
	mustCreate(t, s, CreateRequest{Path: "/kept", ContentType: json, HasTTL: true, TTLSeconds: 3600})
	tail := mustAppendRecord(t, s, AppendRequest{Path: "/kept", ContentType: json, Body: []byte(`[{"a":1},{"a":2}]`)}).Tail
	id := streamIDOf(t, s, "/kept")
	evict("/kept")
	res := mustCreate(t, s, CreateRequest{Path: "/kept", ContentType: json, HasTTL: true, TTLSeconds: 3600})
	if res.Created || res.Info.Tail != tail {
		t.Fatalf("create of the evicted stream: %+v, want the existing stream at tail %d", res, tail)
	}
	evict("/kept")
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/kept", ContentType: "text/plain"}); kindOf(err) != foldtype.CodeConflict {
		t.Fatalf("create of the evicted stream with another content type: %v, want CONFLICT", err)
	}
	evict("/kept")
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/kept", ContentType: json, ExpiresAt: clk.Now().Add(-time.Second)}); kindOf(err) != foldtype.CodeBadRequest {
		t.Fatalf("create of the evicted stream with a past expiry: %v, want BAD_REQUEST", err)
	}
	if got := streamIDOf(t, s, "/kept"); got != id {
		t.Fatalf("/kept is stream %d now, was %d", got, id)
	}

	// A soft-deleted source (its fork still reads it), evicted: the path stays reserved.
	mustCreate(t, s, CreateRequest{Path: "/src", ContentType: json})
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/src"})
	if err := s.Protocol().DeleteStream(ctx, "/src"); err != nil {
		t.Fatal(err)
	}
	evict("/src")
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/src", ContentType: json}); kindOf(err) != foldtype.CodeConflict {
		t.Fatalf("create over a soft-deleted source: %v, want CONFLICT", err)
	}

	// An expired stream, evicted: replaced by a new, empty stream.
	mustCreate(t, s, CreateRequest{Path: "/old", ContentType: json, HasTTL: true, TTLSeconds: 10})
	mustAppendRecord(t, s, AppendRequest{Path: "/old", ContentType: json, Body: []byte(`[{"a":1}]`)})
	oldID := streamIDOf(t, s, "/old")
	evict("/old")
	clk.Advance(11 * time.Second)
	res = mustCreate(t, s, CreateRequest{Path: "/old", ContentType: json})
	if !res.Created || res.Info.Tail != 0 {
		t.Fatalf("create over an expired stream: %+v, want a new empty stream", res)
	}
	if got := streamIDOf(t, s, "/old"); got == oldID {
		t.Fatalf("create over an expired stream kept its id %d", got)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path = '/old'`); n != 1 {
		t.Fatalf("%d rows hold /old, want 1", n)
	}
}

// A plain create of a fresh path (no body, not closed, no fork) is one INSERT: it runs without a
// savepoint of its own, and the streams it makes are the same as those of a create that needs
// one. A create that finds its path taken, or that writes more than the row, still opens one.
func TestPlainCreateRunsItsOneStatementWithoutASavepoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := openStore(":memory:", Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	before := s.savepoints()
	for i := range 20 {
		res := mustCreate(t, s, CreateRequest{Path: fmt.Sprintf("/plain/%d", i), ContentType: "application/json", HasTTL: i%2 == 0, TTLSeconds: 60})
		if !res.Created || res.Info.Tail != 0 || res.Info.ContentType != "application/json" {
			t.Fatalf("plain create %d: %+v", i, res)
		}
	}
	if got := s.savepoints() - before; got != 0 {
		t.Fatalf("20 plain creates opened %d savepoints, want 0", got)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path LIKE '/plain/%' AND state = 0 AND closed = 0
		AND forked_from IS NULL AND fork_offset = 0 AND tail = 0 AND incarnation = 0 AND last_access_ms = created_ms`); n != 20 {
		t.Fatalf("%d plain rows, want 20", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path LIKE '/plain/%' AND ttl_seconds = 60`); n != 10 {
		t.Fatalf("%d rows with the TTL, want 10", n)
	}

	// A create with a body, and a closed one, run in a savepoint.
	before = s.savepoints()
	mustCreate(t, s, CreateRequest{Path: "/body", ContentType: "application/json", Body: []byte(`[{"a":1}]`)})
	mustCreate(t, s, CreateRequest{Path: "/closed", ContentType: "application/json", Closed: true})
	if got := s.savepoints() - before; got != 2 {
		t.Fatalf("a create with a body and a closed create opened %d savepoints, want 2", got)
	}
	if info, err := s.Protocol().HeadStream(ctx, "/closed"); err != nil || !info.Closed {
		t.Fatalf("closed create: %+v %v", info, err)
	}
	// A fresh path another configuration already holds: refused, and the stream kept.
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/plain/1", ContentType: "text/plain"}); kindOf(err) != foldtype.CodeConflict {
		t.Fatalf("create over /plain/1 with another content type: %v, want CONFLICT", err)
	}
}

// An event append to a path the writer holds nothing of inserts the stream without reading the
// path first. When a row holds the path after all — an event stream evicted from the writer's
// cache, a stream of another content type, a soft-deleted source its forks still read — nothing
// is inserted and the append is decided by that row exactly as before.
func TestEventAppendToAPathNotInMemoryIsDecidedByItsRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := openStore(":memory:", Config{Logger: quietLog, ProducerReorderWait: -1, MaxCachedStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	evict := evictor(t, s)
	ev := func(n int) foldtype.EventInput {
		return foldtype.EventInput{Type: "t", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n))}
	}

	// A fresh path: created, the batch at offsets 1 and 2.
	got, err := s.Events().Stream("/fresh").Append(ctx, ev(1), ev(2))
	if err != nil || len(got) != 2 || got[0].Offset != 1 || got[1].Offset != 2 {
		t.Fatalf("append to a fresh path: %v, %v; want offsets 1, 2", got, err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path = '/fresh'`); n != 1 {
		t.Fatalf("%d rows hold /fresh, want 1", n)
	}

	// The same stream, evicted: the append lands on it after its tail.
	id := streamIDOf(t, s, "/fresh")
	evict("/fresh")
	got, err = s.Events().Stream("/fresh").Append(ctx, ev(3))
	if err != nil || len(got) != 1 || got[0].Offset != 3 {
		t.Fatalf("append to the evicted stream: %v, %v; want offset 3", got, err)
	}
	if got := streamIDOf(t, s, "/fresh"); got != id {
		t.Fatalf("/fresh is stream %d now, was %d", got, id)
	}

	// A stream of bytes, evicted: refused, as before.
	mustCreate(t, s, CreateRequest{Path: "/bytes", ContentType: "text/plain"})
	evict("/bytes")
	if _, err := s.Events().Stream("/bytes").Append(ctx, ev(1)); kindOf(err) != foldtype.CodeInvalidEvent {
		t.Fatalf("event append to a byte stream: %v, want INVALID_EVENT", err)
	}

	// A soft-deleted source (its fork still reads it), evicted: STREAM_GONE, nothing created.
	mustCreate(t, s, CreateRequest{Path: "/src", ContentType: "application/json"})
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/src"})
	if err := s.Protocol().DeleteStream(ctx, "/src"); err != nil {
		t.Fatal(err)
	}
	evict("/src")
	if _, err := s.Events().Stream("/src").Append(ctx, ev(1)); kindOf(err) != foldtype.CodeStreamGone {
		t.Fatalf("event append to a soft-deleted source: %v, want STREAM_GONE", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path = '/src'`); n != 1 {
		t.Fatalf("%d rows hold /src, want 1", n)
	}
}

// evictor returns a function that pushes every stream made so far out of the writer's cache of s
// (opened with room for a few streams) by creating fillers, and checks it did.
func evictor(t *testing.T, s *Store) func(paths ...string) {
	fillers := 0
	return func(paths ...string) {
		t.Helper()
		for range 6 {
			mustCreate(t, s, CreateRequest{Path: fmt.Sprintf("/filler/%d", fillers), ContentType: "application/json"})
			fillers++
		}
		for _, p := range paths {
			var held bool
			if err := s.k.Write(context.Background(), func(t *kernel.Tx) error { held = !t.Unheld(p); return nil }); err != nil {
				t.Fatal(err)
			}
			if held {
				t.Fatalf("%s is still in the writer's memory", p)
			}
		}
	}
}
