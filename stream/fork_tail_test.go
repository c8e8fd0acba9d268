package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream"
)

// An HTTP read of a JSON stream whose durable mark sits above its last entry (the batch ended with
// an ephemeral) must reach up-to-date. The bug: readJSON only called a page up to date when its
// last entry reached the tail, so a reader at offset 1 got an empty page with Next 1 and
// "not up to date" forever: catch-up loops spun and long-polls never waited.
func TestReadRecordsReachesTailAboveLastEntry(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "src", foldstream.EventInput{Type: "d"}, foldstream.EventInput{Type: "e", Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []int64{0, 1} {
		res, err := s.ReadRecords(ctx, ReadRequest{Path: "src", After: after})
		if err != nil {
			t.Fatal(err)
		}
		if !res.UpToDate || res.Next != 2 {
			t.Errorf("read after %d: up to date %v, next %d; want true, 2", after, res.UpToDate, res.Next)
		}
	}
}

// A fork at the source's tail (the default fork point, and the Stream-Next-Offset a read at the
// head returns) must be accepted. The bug: the record-boundary check looked for an entry ending
// exactly at the fork offset, but an event batch that ends with an ephemeral moves the durable
// mark (streams.tail) to the ephemeral's offset, which has no entry, so forking such a stream at
// its tail failed with 400 "not a record boundary".
func TestForkAtTailAfterTrailingEphemeral(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "src", foldstream.EventInput{Type: "d"}, foldstream.EventInput{Type: "e", Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, CreateRequest{Path: "f", ForkedFrom: "src"})
	if f.Info.Tail != 2 {
		t.Fatalf("fork tail: got %d, want 2", f.Info.Tail)
	}
	tail := readRecordsTail(t, s, "src")
	mustCreate(t, s, CreateRequest{Path: "g", ForkedFrom: "src", HasForkOffset: true, ForkOffset: tail})
	if _, err := s.Append(ctx, "f", foldstream.EventInput{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	page, err := s.Read(ctx, "f", 0, 10, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.Events[0].Type != "d" || page.Events[1].Type != "x" || page.Events[1].Offset != 3 {
		t.Fatalf("fork read: got %+v, want d@1 then x@3", page.Events)
	}
}

func readRecordsTail(t *testing.T, s *Store, path string) int64 {
	t.Helper()
	res, err := s.ReadRecords(context.Background(), ReadRequest{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if !res.UpToDate {
		t.Fatalf("read %s: not up to date", path)
	}
	return res.Next
}
