package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// TestSeenDurableThroughIgnoresEphemeralOnlyCommits: SeenThrough covers every commit the
// subscription saw, SeenDurableThrough only those holding a durable event, consumed or not.
func TestSeenDurableThroughIgnoresEphemeralOnlyCommits(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	sub := subscribe(t, s, "/a", &recorder{}, SubscribeOptions{Consumes: []string{"x"}})
	mustAppend(t, s, "/a", ev("x"), ev("y"))
	mustAppend(t, s, "/a", ev("y"))
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.SeenDurableThrough(), int64(3); got != want {
		t.Fatalf("SeenDurableThrough after durable commits: got %d, want %d", got, want)
	}
	mustAppend(t, s, "/a", eph("delta"))
	if got, want := sub.SeenThrough(), int64(4); got != want {
		t.Fatalf("SeenThrough after an ephemeral: got %d, want %d", got, want)
	}
	if got, want := sub.SeenDurableThrough(), int64(3); got != want {
		t.Fatalf("SeenDurableThrough after an ephemeral-only commit: got %d, want %d", got, want)
	}
}

// TestSeenRangeStartsAtTheLastConsumedCommit: SeenRange's After is the through of the last
// commit holding a consumed event, so the commits in (After, Through] hold none, and a subscriber
// whose failed delivery left its cursor below After knows it must read the log up to it.
func TestSeenRangeStartsAtTheLastConsumedCommit(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	sub := subscribe(t, s, "/a", &recorder{}, SubscribeOptions{Consumes: []string{"x"}})
	if got, want := sub.SeenRange(), (foldtype.ScannedRange{}); got != want {
		t.Fatalf("SeenRange before any commit: got %+v, want %+v", got, want)
	}
	mustAppend(t, s, "/a", ev("y"), ev("x")) // 1, 2
	mustAppend(t, s, "/a", ev("y"))          // 3
	mustAppend(t, s, "/a", eph("x"))         // 4
	mustAppend(t, s, "/a", ev("y"))          // 5
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.SeenRange(), (foldtype.ScannedRange{After: 4, Through: 5}); got != want {
		t.Fatalf("SeenRange: got %+v, want %+v", got, want)
	}
}

// A subscription made on a stream that already holds consumed events was never offered them: its
// SeenRange never claims that offsets before its first commit hold no consumed event. A host reads
// with an empty push over (max(cursor, After), Through]; an engine whose opening catch-up failed
// (its cursor at an old checkpoint) would otherwise move its cursor over events it never reduced,
// and answer a state that lacks them under an offset past them.
func TestSeenRangeNeverVouchesForCommitsBeforeTheSubscription(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mustAppend(t, s, "/a", ev("x"), ev("x")) // 1, 2: before the subscription
	sub := subscribe(t, s, "/a", &recorder{}, SubscribeOptions{Consumes: []string{"x"}})
	mustAppend(t, s, "/a", ev("y")) // 3: not consumed
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.SeenRange(), (foldtype.ScannedRange{After: 2, Through: 3}); got != want {
		t.Fatalf("SeenRange: got %+v, want %+v: the commits before the subscription were never offered to it", got, want)
	}
	mustAppend(t, s, "/a", eph("x")) // 4: consumed, ephemeral
	mustAppend(t, s, "/a", ev("y"))  // 5
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sub.SeenRange(), (foldtype.ScannedRange{After: 4, Through: 5}); got != want {
		t.Fatalf("SeenRange after a consumed commit: got %+v, want %+v", got, want)
	}
}

// TestCheckpointsOfReadsRowsTogetherAndStaysBoundToItsStream: checkpoints made from a stream's
// info read several rows in one call and, like Checkpoints, refuse a write once that stream was
// deleted and another created at the path.
func TestCheckpointsOfReadsRowsTogetherAndStaysBoundToItsStream(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mustAppend(t, s, "/a", ev("x"))
	info, err := s.Events().HeadStream(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	cps, err := s.Events().CheckpointsOf(info)
	if err != nil {
		t.Fatal(err)
	}
	want := foldtype.Checkpoint{ReducerVersion: "v1", ReducedThroughOffset: 1, State: []byte(`{"n":1}`)}
	if err := cps.WriteCheckpoint(ctx, "p", want, true); err != nil {
		t.Fatal(err)
	}
	rows, err := cps.ReadCheckpoints(ctx, "p", "kv:p:marker")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := rows["p"]; !ok || got.ReducedThroughOffset != 1 || string(got.State) != `{"n":1}` {
		t.Fatalf("row p: got %+v (found %v), want %+v", got, ok, want)
	}
	if _, ok := rows["kv:p:marker"]; ok || len(rows) != 1 {
		t.Fatalf("rows: got %v, want only p", rows)
	}
	if err := s.Protocol().DeleteStream(ctx, "/a"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/a", ev("x"))
	if err := cps.WriteCheckpoint(ctx, "p", want, true); !errors.Is(err, foldtype.ErrStreamDeleted) {
		t.Fatalf("write for the deleted stream: got %v, want STREAM_DELETED", err)
	}
}
