package stream

import (
	"context"
	"fmt"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// On a shared database a group that holds a stream's lock keeps the state of the stream's
// producers it read or wrote, so a group of several batches of one producer reads the producer's
// row once: a group of five batches takes three round trips (the stream's row under its lock, the
// producer's row, and the inserts with the commit) instead of one more per batch, and a retried
// batch in the group is still found a duplicate.
func TestPostgresGroupOfOneProducersBatchesReadsItsStateOnce(t *testing.T) {
	s := openPGStore(t, pgtest.URL(t))
	d := s.drv.(*pgdriver.Driver)
	ctx := context.Background()
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	batch := func(seq int64, res *AppendResult) func() error {
		return func() error {
			r, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
				Body: []byte(fmt.Sprintf(`[{"seq":%d}]`, seq)), Producer: &ProducerHeaders{ID: "p", Seq: seq}})
			*res = r
			return err
		}
	}
	for round, seqs := range [][]int64{{0, 1, 2, 3, 4}, {5, 6, 3, 7, 8}} {
		res := make([]AppendResult, len(seqs))
		var fns []func() error
		for i, seq := range seqs {
			fns = append(fns, batch(seq, &res[i]))
		}
		before := testhooks.PGWriteRoundTrips(d)
		for i, err := range inOneGroup(t, s, fns...) {
			if err != nil {
				t.Fatalf("round %d: batch seq %d: %v", round, seqs[i], err)
			}
		}
		if got := testhooks.PGWriteRoundTrips(d) - before; got > 3 {
			t.Errorf("round %d: a group of %d batches of one producer took %d round trips, want 3", round, len(seqs), got)
		}
		for i, seq := range seqs {
			if dup := seq == 3 && round == 1; res[i].Duplicate != dup {
				t.Errorf("round %d: batch seq %d answered duplicate %v, want %v", round, seq, res[i].Duplicate, dup)
			}
		}
	}
	page, err := s.readEvents(ctx, "/p", 0, 20, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 9 {
		t.Fatalf("the stream holds %d messages, want 9", len(page.Events))
	}
}

// The producer state a group kept is not trusted past the group: another node's batch of the
// producer, committed between two groups of this node, is seen by the next.
func TestPostgresProducerStateWrittenByAnotherNodeIsSeenByTheNextGroup(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPGStore(t, url), openPGStore(t, url)
	ctx := context.Background()
	if _, err := a.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	send := func(s *Store, seq int64) AppendResult {
		t.Helper()
		r, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
			Body: []byte(fmt.Sprintf(`{"seq":%d}`, seq)), Producer: &ProducerHeaders{ID: "p", Seq: seq}})
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		return r
	}
	for seq := range int64(3) {
		send(a, seq)
	}
	if r := send(b, 3); r.Duplicate {
		t.Fatal("the other node found seq 3 a duplicate")
	}
	if r := send(a, 3); !r.Duplicate {
		t.Error("seq 3, stored by the other node, was stored again")
	}
	if r := send(a, 4); r.Duplicate || r.Seq != 4 {
		t.Errorf("seq 4 answered %+v", r)
	}
	page, err := a.readEvents(ctx, "/p", 0, 20, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 5 {
		t.Errorf("the stream holds %d messages, want 5", len(page.Events))
	}
}
