package pgdriver_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
)

// A group's record inserts, sent together as one statement, store every record as written, frames
// or none, empty body or not; and when one of them cannot be stored, none of the group is.
func TestRecordsOfAGroupAreStoredAsWrittenOrNotAtAll(t *testing.T) {
	t.Parallel()
	d := open(t, pgtest.URL(t))
	ctx := context.Background()
	id := insertByteStream(t, d, "/group")
	recs := []driver.Record{
		{StreamID: id, RecordStart: 0, Start: 0, End: 3, CreatedMs: 5, Body: []byte("abc")},
		{StreamID: id, RecordStart: 3, Start: 3, End: 5, CreatedMs: 6, Frames: []byte{1, 2}, Body: []byte("de")},
		{StreamID: id, RecordStart: 5, Start: 5, End: 6, CreatedMs: 7, Body: []byte{}},
		{StreamID: id, RecordStart: 6, Start: 6, End: 8, CreatedMs: 8, Frames: []byte{}, Body: []byte("fg")},
	}
	write := func(recs []driver.Record) error {
		w, err := d.Writer(ctx)
		if err != nil {
			return err
		}
		tx, err := w.Begin(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := tx.Savepoint(ctx); err != nil {
				return err
			}
			if err := tx.InsertRecord(ctx, r); err != nil {
				return err
			}
			if err := tx.ReleaseSavepoint(ctx); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			tx.Rollback(ctx)
			return err
		}
		return nil
	}
	read := func() []driver.Record {
		var got []driver.Record
		if err := d.Read(ctx, func(r driver.Reader) error {
			return r.Records(ctx, id, 0, func(rec driver.Record) (bool, error) {
				got = append(got, rec)
				return true, nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := write(recs); err != nil {
		t.Fatal(err)
	}
	got := read()
	if len(got) != len(recs) {
		t.Fatalf("stored %d records, want %d", len(got), len(recs))
	}
	for i, r := range recs {
		g := got[i]
		if g.RecordStart != r.RecordStart || g.Start != r.Start || g.End != r.End || g.CreatedMs != r.CreatedMs ||
			!bytes.Equal(g.Body, r.Body) || !bytes.Equal(g.Frames, r.Frames) || (g.Frames == nil) != (r.Frames == nil) {
			t.Errorf("record %d stored as %+v, want %+v", i, g, r)
		}
	}
	// The second of three collides with a stored record: the group fails, its new records are not
	// stored.
	err := write([]driver.Record{
		{StreamID: id, RecordStart: 8, Start: 8, End: 9, Body: []byte("h")},
		{StreamID: id, RecordStart: 3, Start: 3, End: 5, Body: []byte("xx")},
		{StreamID: id, RecordStart: 9, Start: 9, End: 10, Body: []byte("i")},
	})
	if err == nil {
		t.Fatal("a group with a record colliding with a stored one committed")
	}
	if got := read(); len(got) != len(recs) || got[len(got)-1].End != 8 {
		t.Fatalf("after the failed group the stream holds %d records ending at %d, want %d ending at 8", len(got), got[len(got)-1].End, len(recs))
	}
}
