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
	id := insertByteStream(t, d, "/long")
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
	err := d.Read(ctx, func(r driver.Reader) error {
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

// insertRecords makes a stream of n records of size bytes each and returns its id.
func insertRecords(t *testing.T, d interface {
	driver.Driver
}, exec func(ctx context.Context, sql string, args ...any) error, path string, n, size int) int64 {
	t.Helper()
	ctx := context.Background()
	id := insertByteStream(t, d, path)
	if err := exec(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, body)
		SELECT $1, (g-1)*$2, (g-1)*$2, g*$2, 0, convert_to(repeat('x', $2::int), 'UTF8') FROM generate_series(1, $3::int) g`,
		id, size, n); err != nil {
		t.Fatal(err)
	}
	return id
}

// insertByteStream creates an empty byte stream at path in a transaction of its own and returns
// its id.
func insertByteStream(t *testing.T, d driver.Driver, path string) int64 {
	t.Helper()
	ctx := context.Background()
	w, err := d.Writer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := tx.InsertStream(ctx, driver.Stream{Path: path, ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// pageTakes returns how many records of equal size a page of budget bytes takes
// (driver.SizedRecordsReader): its first, whole ones while they fit, and one more while it is less
// than half full.
func pageTakes(size, budget, available int) int {
	k := 1
	for k < available && ((k+1)*size <= budget || k*size < max(1, budget/2)) {
		k++
	}
	return min(k, available)
}

// TestAPageReadFetchesOnlyTheRecordsItTakes checks that a page read (driver.SizedRecordsReader)
// makes PostgreSQL send the records the page takes, not a chunk of rows it then drains: a
// catch-up page of 1 MiB over 100 KB records used to pull about 2.4 MiB off the connection for
// the 1 MiB it took (docs/postgres.md#reads).
func TestAPageReadFetchesOnlyTheRecordsItTakes(t *testing.T) {
	t.Parallel()
	proxy, url := pgtest.NewProxy(t, pgtest.URL(t))
	d := open(t, url)
	ctx := context.Background()
	const records, size, budget = 100, 100_000, 1 << 20
	id := insertRecords(t, d, func(ctx context.Context, sql string, args ...any) error {
		_, err := d.Pool().Exec(ctx, sql, args...)
		return err
	}, "/pages", records, size)

	for _, after := range []int64{0, 5*size + size/2, (records - 3) * size} {
		before := proxy.BytesFromServer()
		n := 0
		next := after
		var stopped bool
		err := d.Read(ctx, func(r driver.Reader) error {
			var err error
			stopped, err = r.(driver.SizedRecordsReader).RecordsWithin(ctx, id, after, budget, func(rec driver.Record) (bool, error) {
				if rec.Start > next || rec.End <= next {
					t.Fatalf("record (%d, %d] after position %d", rec.Start, rec.End, next)
				}
				next = rec.End
				n++
				return true, nil // as a page taking whole records does: the driver ends the page
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		left := int(records - after/size)
		want := pageTakes(size, budget, left)
		if n != want || stopped != (want < left) {
			t.Fatalf("page after %d: %d records, stopped %v; want %d, stopped %v", after, n, stopped, want, want < left)
		}
		// The records the page took and the protocol around them (rows it does not take come
		// without bodies).
		if got := proxy.BytesFromServer() - before; got > int64(n*size+16<<10) {
			t.Fatalf("a page of %d records after %d took %d bytes off the connection; want at most theirs (%d) and a little protocol", n, after, got, n*size)
		}
	}
}

// TestRecordsWithinSeesWhatRecordsSees checks that a page read hands out what Records does, in
// order, up to where its caller or its page ends.
func TestRecordsWithinSeesWhatRecordsSees(t *testing.T) {
	t.Parallel()
	d := open(t, pgtest.URL(t))
	ctx := context.Background()
	const records, size = 3000, 10
	id := insertRecords(t, d, func(ctx context.Context, sql string, args ...any) error {
		_, err := d.Pool().Exec(ctx, sql, args...)
		return err
	}, "/hint", records, size)
	for _, budget := range []int{1, 10, 95, 1000, 20_000, 29_990, 1 << 20} {
		for _, after := range []int64{0, 5, 15_000, 29_990, 30_000} {
			for _, stop := range []int{1, 2, 64, 65, 200, 2000, 5000} {
				var want, got []int64
				collect := func(into *[]int64) func(driver.Record) (bool, error) {
					return func(rec driver.Record) (bool, error) {
						if len(rec.Body) != int(rec.End-rec.Start) {
							t.Fatalf("record (%d, %d] has %d bytes", rec.Start, rec.End, len(rec.Body))
						}
						*into = append(*into, rec.End)
						return len(*into) < stop, nil
					}
				}
				var stopped bool
				err := d.Read(ctx, func(r driver.Reader) error {
					if err := r.Records(ctx, id, after, collect(&want)); err != nil {
						return err
					}
					var err error
					stopped, err = r.(driver.SizedRecordsReader).RecordsWithin(ctx, id, after, budget, collect(&got))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(want) > 0 {
					page := pageTakes(size, budget, records-int(after/size))
					if page < len(want) {
						want = want[:page]
					}
				}
				if len(got) != len(want) || (stopped && len(got) == 0) {
					t.Fatalf("budget %d after %d stop %d: got %d records (stopped %v), want %d", budget, after, stop, len(got), stopped, len(want))
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("budget %d after %d stop %d: record %d ends at %d, want %d", budget, after, stop, i, got[i], want[i])
					}
				}
			}
		}
	}
}
