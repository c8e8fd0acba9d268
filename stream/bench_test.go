package stream

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/stream/driver"
)

// Benchmarks of append throughput on a real file with synchronous=FULL. Run with
//
//	go test -run '^$' -bench 'Append' -benchtime 3000x -count 5 ./stream
//
// and quote the medians. BenchmarkAppendVsRaw measures the store and a plain database/sql batched
// insert into the same file layout in one run and reports their ratio.

// benchPayload makes an event of about 200 bytes stored.
var benchPayload = foldstream.JSON(map[string]any{"user": "u-12345", "note": strings.Repeat("x", 100), "n": 42})

func benchStore(b *testing.B) (*Store, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := Open(path, Options{Logger: quietLog, Synchronous: SyncFull})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, path
}

// appendConcurrently appends n single-event batches from k goroutines and returns the elapsed time.
func appendConcurrently(b *testing.B, s *Store, n, k int) time.Duration {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range k {
		share := n / k
		if w < n%k {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range share {
				if _, err := s.Append(ctx, "/bench", foldstream.EventInput{Type: "bench/event", Payload: benchPayload}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func BenchmarkAppend(b *testing.B) {
	for _, k := range []int{1, 16} {
		b.Run(fmt.Sprintf("appenders=%d", k), func(b *testing.B) {
			s, _ := benchStore(b)
			mustAppend(b, s, "/bench", ev("warm"))
			c0 := s.commits.Load()
			b.ResetTimer()
			d := appendConcurrently(b, s, b.N, k)
			b.ReportMetric(float64(b.N)/d.Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/float64(s.commits.Load()-c0), "events/commit")
		})
	}
}

// rawInserter inserts records with plain database/sql into a fresh file with the store's schema
// and pragmas (WAL, synchronous=FULL): one prepared INSERT of one record row per event (the row a
// one-event append writes), one transaction per batch.
type rawInserter struct {
	db     *sql.DB
	body   []byte
	frames []byte
	off    int64
}

func newRawInserter(b *testing.B) *rawInserter {
	b.Helper()
	path := filepath.Join(b.TempDir(), "raw.db")
	s, err := Open(path, Options{Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	mustAppend(b, s, "/bench", ev("warm")) // creates the stream row (id 1) like the store run
	s.Close()
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	body := finishBody(mustPrefix(b), "2035-01-01T00:00:00.000Z")
	return &rawInserter{db: db, body: body, frames: driver.AppendFrame(nil, 1, len(body)), off: 1}
}

// insert inserts n rows in transactions of batch rows and returns the elapsed time.
func (r *rawInserter) insert(b *testing.B, n, batch int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < n; {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body) VALUES (1, ?, ?, ?, 0, ?, ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < batch && done < n; i++ {
			r.off++
			if _, err := stmt.ExecContext(ctx, r.off-1, r.off-1, r.off, r.frames, r.body); err != nil {
				b.Fatal(err)
			}
			done++
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

func mustPrefix(b *testing.B) []byte {
	p, err := prepareInputs([]foldstream.EventInput{{Type: "bench/event", Payload: benchPayload}})
	if err != nil {
		b.Fatal(err)
	}
	return p[0].prefix
}

func BenchmarkRawBatchedInsert(b *testing.B) {
	for _, batch := range []int{16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			r := newRawInserter(b)
			b.ResetTimer()
			d := r.insert(b, b.N, batch)
			b.ReportMetric(float64(b.N)/d.Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendVsRaw compares, in one run, b.N events appended by 16 concurrent appenders (one
// event per append) with b.N rows inserted raw in batches of 16 (the group size 16 appenders can
// reach) into another file on the same disk. The two alternate in chunks of 256 events so that
// drift in the disk's fsync latency hits both alike. It reports both rates and store/raw.
func BenchmarkAppendVsRaw(b *testing.B) {
	s, _ := benchStore(b)
	mustAppend(b, s, "/bench", ev("warm"))
	raw := newRawInserter(b)
	c0 := s.commits.Load()
	var storeTime, rawTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(256, b.N-done)
		storeTime += appendConcurrently(b, s, n, 16)
		rawTime += raw.insert(b, n, 16)
		done += n
	}
	b.StopTimer()
	storeRate := float64(b.N) / storeTime.Seconds()
	rawRate := float64(b.N) / rawTime.Seconds()
	b.ReportMetric(float64(b.N)/float64(s.commits.Load()-c0), "events/commit")
	b.ReportMetric(storeRate, "events/s")
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(storeRate/rawRate, "store/raw")
}
