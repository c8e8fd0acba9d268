package pgdriver_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
)

// TestRecordsStoppedEarlyReadsOnlyWhatItNeeds checks that a reader which stops after the first
// record of a long stream does not pull the rest of the stream off the connection: reading a
// page must cost O(page), not O(stream), or catching up on a stream page by page is quadratic
// in its length (docs/postgres.md#reads).
func TestRecordsStoppedEarlyReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	proxy, url := pgtest.NewProxy(t, pgtest.URL(t))
	d := open(t, url)
	ctx := context.Background()

	const records, size = 4000, 1000 // a 4 MB stream
	w, err := d.Writer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := tx.InsertStream(ctx, driver.Stream{Path: "/long", ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, body)
		SELECT $1, (g-1)*$2, (g-1)*$2, g*$2, 0, convert_to(repeat('x', $2::int), 'UTF8') FROM generate_series(1, $3::int) g`,
		id, size, records); err != nil {
		t.Fatal(err)
	}

	for _, after := range []int64{0, records / 2 * size} {
		before := proxy.BytesFromServer()
		var got []driver.Record
		err := d.Read(ctx, func(r driver.Reader) error {
			return r.Records(ctx, id, after, func(rec driver.Record) (bool, error) {
				got = append(got, rec)
				return len(got) < 3, nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].Start != after || got[2].End != after+3*size {
			t.Fatalf("read after %d: got %d records starting at %d, want 3 from %d", after, len(got), got[0].Start, after)
		}
		// Three 1000-byte records and the protocol around them; a bound of 64 KB leaves room for
		// a first chunk of a few dozen rows but not for the 4 MB rest of the stream.
		if n := proxy.BytesFromServer() - before; n > 64<<10 {
			t.Fatalf("read of 3 records after %d took %d bytes off the connection; want O(page) (< 64 KiB), not the whole %d-byte stream", after, n, records*size)
		}
	}

	// A full scan still sees every record once, in order.
	n, next := 0, int64(0)
	err = d.Read(ctx, func(r driver.Reader) error {
		return r.Records(ctx, id, 0, func(rec driver.Record) (bool, error) {
			if rec.Start != next {
				t.Fatalf("record %d starts at %d, want %d", n, rec.Start, next)
			}
			next = rec.End
			n++
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != records {
		t.Fatalf("full scan read %d records, want %d", n, records)
	}
}
