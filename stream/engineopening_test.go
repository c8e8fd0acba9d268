package stream

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// TestEngineOpeningReadsTheStreamItsCheckpointsAndTheEventsAfterTheCheckpoint: the opening read,
// in a read transaction and (for work, on SQLite) in the writer, answers the stream, the
// checkpoint rows found and the page after the offset the rows give, and a missing stream is
// STREAM_NOT_FOUND.
func TestEngineOpeningReadsTheStreamItsCheckpointsAndTheEventsAfterTheCheckpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		forWork bool
	}{{"read", false}, {"work", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testEngineOpening(t, func(e *Events) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error) {
				return openingOf(e, c.forWork)
			})
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

// TestEngineOpeningInTheWriterFindsEveryCheckpointOfAStreamItCreated: on SQLite, while a host
// watches commits, the opening in the writer of a stream the writer created skips the checkpoint
// query only when the stream can have no rows; it still finds a row written to the path after
// the creation, one written while no stream held the path (in this process, or before the store
// was opened), and none after the stream was deleted and created again.
func TestEngineOpeningInTheWriterFindsEveryCheckpointOfAStreamItCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, file := setupFile(t)
	stop := s.Events().WatchCommits(func(string) {})
	defer stop()
	slugs := []string{"p", "p:marker"}
	atCheckpoint := func(rows map[string]foldtype.Checkpoint) int64 { return rows["p"].ReducedThroughOffset }
	write := func(s *Store, path string, through int64) {
		t.Helper()
		cps, err := s.Events().Checkpoints(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: through}, false); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(s *Store, path string, through int64, found bool) {
		t.Helper()
		o, err := openingOf(s.Events(), true)(ctx, path, slugs, atCheckpoint, 10)
		if err != nil {
			t.Fatal(err)
		}
		cp, ok := o.Checkpoints["p"]
		if ok != found || (found && cp.ReducedThroughOffset != through) {
			t.Fatalf("%s: checkpoints %+v, want found %v at %d", path, o.Checkpoints, found, through)
		}
	}

	// Created here, no row: none found; a row written since: found.
	mustAppend(t, s, "/fresh", ev("x"), ev("x"))
	expect(s, "/fresh", 0, false)
	write(s, "/fresh", 1)
	expect(s, "/fresh", 1, true)

	// A row written while no stream held the path, then the stream created: found.
	write(s, "/early", 0)
	mustAppend(t, s, "/early", ev("x"))
	expect(s, "/early", 0, true)

	// Deleted (its rows go with it) and created again: none found.
	if err := s.Protocol().DeleteStream(ctx, "/fresh"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/fresh", ev("x"))
	expect(s, "/fresh", 0, false)

	// A row written while no stream held the path, before the store was opened again: found.
	write(s, "/before", 2)
	stop()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := openStore(file, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	defer s2.Events().WatchCommits(func(string) {})()
	mustAppend(t, s2, "/before", ev("x"), ev("x"), ev("x"))
	expect(s2, "/before", 2, true)
	mustAppend(t, s2, "/other", ev("x"))
	expect(s2, "/other", 0, false)
}

// questionDriver is the SQLite driver whose read transactions hold the question about checkpoint
// rows without a stream (driver.StreamlessCheckpointFinder) until release is closed, and say
// when it was asked.
type questionDriver struct {
	*sqlitedriver.Driver
	asked, release chan struct{}
}

func (d questionDriver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	return d.Driver.Read(ctx, func(q driver.Reader) error { return fn(heldQuestion{q, d}) })
}

type heldQuestion struct {
	driver.Reader
	d questionDriver
}

func (q heldQuestion) HasStreamlessCheckpoints(ctx context.Context) (bool, error) {
	close(q.d.asked)
	select {
	case <-q.d.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return q.Reader.(driver.StreamlessCheckpointFinder).HasStreamlessCheckpoints(ctx)
}

// The question whether checkpoint rows without a stream exist reads every checkpoint scope (long
// on a large database): it is asked in a read of its own, so appends that create streams commit
// while it runs, and the streams created before its answer read their checkpoint rows. Once the
// answer (none) is in, a stream created at a fresh path is known to have none.
func TestTheQuestionAboutCheckpointsWithoutAStreamNeverHoldsUpTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sd, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	d := questionDriver{Driver: sd, asked: make(chan struct{}), release: make(chan struct{})}
	s, err := OpenDriver(ctx, d, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	defer s.Events().WatchCommits(func(string) {})()

	mustAppend(t, s, "/first", ev("x")) // starts the question
	select {
	case <-d.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the question about checkpoint rows without a stream was never asked in a read")
	}
	// The question is held: the writer creates streams meanwhile, none of them known to have no rows.
	appended := make(chan error, 1)
	go func() {
		_, err := s.Events().Stream("/second").Append(ctx, ev("x"))
		appended <- err
	}()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append waited for the question about checkpoint rows")
	}
	for _, p := range []string{"/first", "/second"} {
		if knowsNoCheckpoints(s, p) {
			t.Errorf("%s, created before the answer: known to have no checkpoint rows", p)
		}
	}
	close(d.release)
	if !wait.Every(10*time.Second, time.Millisecond, func() bool { return s.ls.checkpoints.answer.Load() != 0 }) {
		t.Fatal("no answer after the question was released")
	}
	mustAppend(t, s, "/third", ev("x"))
	if !knowsNoCheckpoints(s, "/third") {
		t.Error("/third, created after the answer (none): not known to have no checkpoint rows")
	}
}

// knowsNoCheckpoints reports the writer's mark that the stream at path has no checkpoint rows.
func knowsNoCheckpoints(s *Store, path string) bool {
	known := false
	_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
		m, err := t.Stream(path)
		known = err == nil && s.noCheckpointsExt.Get(m)
		return nil
	})
	return known
}

// openingOf is ReadOpening (for work or for a read) with the request's fields as arguments.
func openingOf(e *Events, forWork bool) func(context.Context, string, []string, func(map[string]foldtype.Checkpoint) int64, int) (EngineOpening, error) {
	return func(ctx context.Context, path string, slugs []string, after func(map[string]foldtype.Checkpoint) int64, limit int) (EngineOpening, error) {
		return e.ReadOpening(ctx, OpeningRequest{Path: path, Slugs: slugs, After: after, Limit: limit, ForWork: forWork})
	}
}
