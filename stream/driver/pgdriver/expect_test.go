package pgdriver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/foldstream/foldstream/stream/driver"
)

// ExpectStream's check holds exactly when the durable tail is the one expected — the larger of the
// row's base tail and the last record's end, whether the stream has records past its base tail,
// records at or below it, or none — and the highest offset handed out is at most the one given.
// Both forms of the check agree: the one queued outside every savepoint, and the one sent in place
// once the function's savepoint has gone to the server.
func TestExpectStreamHoldsExactlyWhenTheDurableTailAndHighestAreAsExpected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, w := openWriter(t)
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// A stream from base tail base, with records ending at ends, and highest handed out (0: none
	// recorded); returns its row as a read finds it.
	mk := func(path string, base int64, ends []int64, highest int64) driver.Stream {
		t.Helper()
		tx, err := w.Begin(ctx)
		step(err)
		id, err := tx.InsertStream(ctx, driver.Stream{Path: path, ContentType: "text/plain", CreatedMs: 1, BaseTail: base})
		step(err)
		for _, e := range ends {
			step(tx.InsertRecord(ctx, driver.Record{StreamID: id, RecordStart: e - 1, Start: e - 1, End: e, Body: []byte("x")}))
		}
		if highest > 0 {
			step(tx.UpdateStream(ctx, id, driver.StreamUpdate{Highest: &highest}))
		}
		step(tx.Commit(ctx))
		var row driver.Stream
		step(d.Read(ctx, func(r driver.Reader) (err error) { row, err = r.StreamByID(ctx, id); return err }))
		return row
	}
	withRecords := mk("/records", 5, []int64{6, 7}, 9)
	bare := mk("/bare", 5, nil, 0)
	empty := mk("/empty", 0, nil, 0)
	below := mk("/below", 10, []int64{7}, 0)
	if withRecords.Tail != 7 || bare.Tail != 5 || empty.Tail != 0 || below.Tail != 10 || withRecords.Highest != 9 {
		t.Fatalf("durable tails %d %d %d %d, highest %d; want 7 5 0 10, 9",
			withRecords.Tail, bare.Tail, empty.Tail, below.Tail, withRecords.Highest)
	}
	tailed := func(s driver.Stream, tail int64) driver.Stream { s.Tail = tail; return s }

	cases := []struct {
		name    string
		want    driver.Stream
		highest int64
		holds   bool
	}{
		{"records: the last record's end", withRecords, 9, true},
		{"records: a higher highest", withRecords, 12, true},
		{"records: a lower highest", withRecords, 8, false},
		{"records: a record past the tail", tailed(withRecords, 6), 9, false},
		{"records: the base tail", tailed(withRecords, 5), 9, false},
		{"records: past the last record", tailed(withRecords, 8), 9, false},
		{"no records: the base tail", bare, 5, true},
		{"no records: under the base tail", tailed(bare, 4), 5, false},
		{"no records: past the base tail", tailed(bare, 6), 6, false},
		{"nothing: zero", empty, 0, true},
		{"nothing: past zero", tailed(empty, 1), 1, false},
		{"records under the base tail: the base tail", below, 10, true},
		{"records under the base tail: the last record's end", tailed(below, 7), 10, false},
		{"another stream's row", func() driver.Stream { s := bare; s.ID = withRecords.ID; return s }(), 9, false},
	}
	for _, c := range cases {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/in place %v", c.name, inPlace), func(t *testing.T) {
				tx, err := w.Begin(ctx)
				step(err)
				defer func() { _ = tx.Rollback(ctx) }()
				if inPlace {
					// The function's savepoint goes to the server with a read: the check is sent
					// where it is queued, inside the savepoint.
					step(tx.Savepoint(ctx))
					if _, err := tx.StreamByID(ctx, c.want.ID); err != nil {
						t.Fatal(err)
					}
				}
				err = tx.(driver.StreamExpecter).ExpectStream(ctx, c.want, c.highest)
				if err == nil {
					err = tx.Commit(ctx)
				}
				var stale *driver.StaleStreamError
				switch {
				case c.holds && err != nil:
					t.Fatalf("check failed: %v", err)
				case !c.holds && !errors.As(err, &stale):
					t.Fatalf("check of %+v (highest %d): %v, want a StaleStreamError", c.want, c.highest, err)
				}
			})
		}
	}
}
