package stream

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// A node's write to a stream whose row it knows from its own last commit sends, instead of reading
// the row under the stream's lock first, a check with its statements
// (docs/postgres.md#writes-round-trips). When another node wrote the stream in between — an append,
// a close, a delete and a new stream at the path — the check fails and the write runs again with
// the row read under the lock: it takes the offset after the other node's records, is refused on
// the closed stream, and lands on the new stream. Without the check the node would write at offsets
// another node already used (or after a close, or into a deleted stream).
func TestPostgresWriteAfterAnotherNodesWriteRunsAgainUnderTheLock(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPGStore(t, url), openPGStore(t, url)
	ctx := context.Background()
	add := func(s *Store, path, typ string) (int64, error) {
		evs, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: typ})
		if err != nil {
			return 0, err
		}
		return evs[0].Offset, nil
	}
	must := func(s *Store, path, typ string, want int64) {
		t.Helper()
		got, err := add(s, path, typ)
		if err != nil {
			t.Fatalf("append %s to %s: %v", typ, path, err)
		}
		if got != want {
			t.Fatalf("append %s to %s got offset %d, want %d", typ, path, got, want)
		}
	}
	must(a, "/x", "a1", 1)
	must(a, "/x", "a2", 2)
	must(b, "/x", "b1", 3)
	must(a, "/x", "a3", 4)

	// In a group, the stream another node wrote runs again; the group's other write is not lost.
	must(a, "/y", "y1", 1)
	must(b, "/x", "b2", 5)
	var xOff, yOff int64
	errs := inOneGroup(t, a,
		func() (err error) { xOff, err = add(a, "/x", "a4"); return err },
		func() (err error) { yOff, err = add(a, "/y", "y2"); return err })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if xOff != 6 || yOff != 2 {
		t.Fatalf("the group's appends got offsets %d (/x) and %d (/y), want 6 and 2", xOff, yOff)
	}
	page, err := a.readEvents(ctx, "/x", 0, 20, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a1", "a2", "b1", "a3", "b2", "a4"}
	if len(page.Events) != len(want) {
		t.Fatalf("/x holds %d events, want %d", len(page.Events), len(want))
	}
	for i, e := range page.Events {
		if e.Type != want[i] || e.Offset != int64(i+1) {
			t.Errorf("/x event %d: %s at offset %d, want %s at %d", i, e.Type, e.Offset, want[i], i+1)
		}
	}

	// Closed by another node.
	if _, err := b.Protocol().AppendRecord(ctx, AppendRequest{Path: "/x", ContentType: "application/json", Close: true}); err != nil {
		t.Fatal(err)
	}
	var fe *foldtype.Error
	if _, err := add(a, "/x", "after-close"); !errors.As(err, &fe) || fe.Code != foldtype.CodeStreamClosed {
		t.Errorf("append to the stream another node closed: %v, want %s", err, foldtype.CodeStreamClosed)
	}

	// Deleted, and a new stream at its path, by another node.
	must(a, "/z", "z1", 1)
	must(a, "/z", "z2", 2)
	if err := b.Protocol().DeleteStream(ctx, "/z"); err != nil {
		t.Fatal(err)
	}
	must(b, "/z", "new", 1)
	must(a, "/z", "z3", 2)
}

// A group of appends to separate streams this node wrote last takes one round trip: BEGIN, each
// stream's check, the records and the notifications go with COMMIT
// (docs/postgres.md#writes-round-trips).
func TestPostgresGroupOfAppendsToStreamsThisNodeWroteTakesOneRoundTrip(t *testing.T) {
	url := pgtest.URL(t)
	s := openPGStore(t, url)
	d := s.drv.(*pgdriver.Driver)
	ctx := context.Background()
	paths := []string{"/a", "/b", "/c", "/d", "/e"}
	for _, p := range paths {
		if _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		var fns []func() error
		for _, p := range paths {
			fns = append(fns, func() error {
				_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: p, ContentType: "application/json", Body: []byte(`{"n":1}`)})
				return err
			})
		}
		before := testhooks.PGWriteRoundTrips(d)
		for i, err := range inOneGroup(t, s, fns...) {
			if err != nil {
				t.Fatalf("round %d: append to %s: %v", round, paths[i], err)
			}
		}
		if got := testhooks.PGWriteRoundTrips(d) - before; got != 1 {
			t.Errorf("round %d: a group of %d appends to streams this node wrote took %d round trips, want 1", round, len(paths), got)
		}
	}
	for _, p := range paths {
		page, err := s.readEvents(ctx, p, 0, 10, readOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 4 {
			t.Errorf("%s holds %d events, want 4", p, len(page.Events))
		}
		for i, e := range page.Events {
			if e.Offset != int64(i+1) {
				t.Errorf("%s: event %d at offset %d", p, i, e.Offset)
			}
		}
	}
}

// A group whose writes reach many streams another node wrote since this node last did (what a
// node meets when its peer stopped and handed its processors over: the peer wrote them last) runs
// again once, every one of those streams read under its lock, not once per stream: the check names
// only the first stream that changed, and a group of a hundred writes run two dozen times held
// every write of a node back for seconds on a busy machine (docs/postgres.md#graceful-hand-over).
func TestPostgresGroupOverManyStreamsAnotherNodeWroteRunsAgainOnce(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPGStore(t, url), openPGStore(t, url)
	ctx := context.Background()
	const streams = 10
	path := func(i int) string { return fmt.Sprintf("/moved/%d", i) }
	for i := range streams {
		if _, err := a.Events().Stream(path(i)).Append(ctx, foldtype.EventInput{Type: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range streams {
		if _, err := b.Events().Stream(path(i)).Append(ctx, foldtype.EventInput{Type: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	// This node hears of the other's commits and would read those rows under their locks
	// (TestPostgresWriteToAStreamAnotherNodeWroteReadsItsRowWhenThisNodeHeardOfIt); drop those
	// hints, so the group relies on its stale entries — a notification that never came — and the
	// failed check is what leads it to the rows.
	waitFor(t, func() bool { return a.k.RemoteHeard() >= streams })
	a.k.ForgetRemote()
	failed, stop := countFailedCommits(a)
	defer stop()
	offsets := make([]int64, streams)
	fns := make([]func() error, streams)
	for i := range fns {
		fns[i] = func() error {
			evs, err := a.Events().Stream(path(i)).Append(ctx, foldtype.EventInput{Type: "again"})
			if err == nil {
				offsets[i] = evs[0].Offset
			}
			return err
		}
	}
	for i, err := range inOneGroup(t, a, fns...) {
		if err != nil {
			t.Fatalf("append to %s: %v", path(i), err)
		}
		if offsets[i] != 3 {
			t.Errorf("append to %s got offset %d, want 3 (after the other node's)", path(i), offsets[i])
		}
	}
	// Once at most (the hints of the other node's commits were dropped above, so the group relies
	// on this node's stale entries and its first commit fails).
	if n := failed(); n > 1 {
		t.Errorf("the group's commit failed %d times, want once at most: each stream the other node wrote cost the whole group another run", n)
	}
}

// A node that heard another node's commit to a stream (its notification) reads the stream's row
// under the lock for its next write there, instead of relying on its own entry: the check sent with
// the commit would fail and the whole group run again (docs/postgres.md#graceful-hand-over).
func TestPostgresWriteToAStreamAnotherNodeWroteReadsItsRowWhenThisNodeHeardOfIt(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPGStore(t, url), openPGStore(t, url)
	ctx := context.Background()
	if _, err := a.Events().Stream("/heard").Append(ctx, foldtype.EventInput{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Events().Stream("/heard").Append(ctx, foldtype.EventInput{Type: "b"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.k.HeardRemote() }) // a heard b's commit
	failed, stop := countFailedCommits(a)
	defer stop()
	evs, err := a.Events().Stream("/heard").Append(ctx, foldtype.EventInput{Type: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Offset != 3 {
		t.Errorf("append got offset %d, want 3 (after the other node's)", evs[0].Offset)
	}
	if n := failed(); n != 0 {
		t.Errorf("the append's commit failed %d times, want none: it relied on the row this node wrote last, which the other node's commit it heard of had changed", n)
	}
}

// countFailedCommits counts s's failed commits from now on until stop is called.
func countFailedCommits(s *Store) (failed func() int, stop func()) {
	var n atomic.Int64
	stop = s.ObserveCommits(func(c CommitStats) {
		if c.Failed {
			n.Add(1)
		}
	})
	return func() int { return int(n.Load()) }, stop
}
