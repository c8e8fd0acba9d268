package pgdriver_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// TestLargeRowsAreReadInBulkAndEveryConnectionEndsAtAOneByteThreshold reads records of 100 KB
// and 1 MB off a real server: the pool's TCP connections raise their read threshold for them
// (docs/postgres.md#reads), every record arrives whole, and each connection is back at a
// threshold of one byte afterwards, so the small answers that follow are read at once.
func TestLargeRowsAreReadInBulkAndEveryConnectionEndsAtAOneByteThreshold(t *testing.T) {
	t.Parallel()
	d := open(t, pgtest.URL(t))
	ctx := context.Background()
	id := insertByteStream(t, d, "/large")
	sizes := []int{100_000, 1 << 20, 10, 100_000, 1 << 20}
	pos := int64(0)
	for _, n := range sizes {
		// md5 text does not compress, so PostgreSQL sends what it stores.
		if _, err := d.Pool().Exec(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, body)
			SELECT $1, $2::bigint, $2::bigint, $2::bigint + $3, 0, substring(convert_to(string_agg(md5(g::text), ''), 'UTF8') for $3::int)
			FROM generate_series(1, $3::int / 32 + 1) g`, id, pos, n); err != nil {
			t.Fatal(err)
		}
		pos += int64(n)
	}
	for round := 0; round < 3; round++ {
		var got []int
		err := d.Read(ctx, func(r driver.Reader) error {
			return r.Records(ctx, id, 0, func(rec driver.Record) (bool, error) {
				got = append(got, len(rec.Body))
				return true, nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(sizes) {
			t.Fatalf("read %d records, want %d", len(got), len(sizes))
		}
		for i := range sizes {
			if got[i] != sizes[i] {
				t.Fatalf("record %d: %d bytes, want %d", i, got[i], sizes[i])
			}
		}
	}
	conns := d.Pool().AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	raises := 0
	for _, c := range conns {
		n, lowat, ok, err := pgdriver.BulkReadState(c.Conn().PgConn().Conn())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("a pool connection over TCP does not read in bulk")
		}
		if lowat != 1 {
			t.Fatalf("an idle connection waits for %d bytes before it reads, want 1", lowat)
		}
		raises += n
	}
	if raises == 0 {
		t.Fatal("no connection raised its read threshold for 100 KB and 1 MB rows")
	}
}
