package stream

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// Benchmarks of append throughput on a real file with synchronous=FULL. Run with
//
//	go test -run '^$' -bench 'Append' -benchtime 3000x -count 5 ./stream
//
// and quote the medians. BenchmarkAppendVsRaw measures the store and a plain database/sql batched
// insert into the same file layout in one run and reports their ratio.

// benchPayload makes an event of about 200 bytes stored.
var benchPayload = foldtype.JSON(map[string]any{"user": "u-12345", "note": strings.Repeat("x", 100), "n": 42})

func benchStore(b *testing.B) (*Store, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := openStoreSync(path, sqlitedriver.SyncFull, Config{Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	return s, path
}

// appendConcurrently appends n single-event batches from k goroutines and returns the elapsed time.
func appendConcurrently(b *testing.B, s *Store, n, k int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	inShares(n, k, func(_, share int) {
		for range share {
			if _, err := s.Events().Stream("/bench").Append(ctx, foldtype.EventInput{Type: "bench/event", Payload: benchPayload}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	return time.Since(start)
}

func BenchmarkAppend(b *testing.B) {
	for _, k := range []int{1, 16} {
		b.Run(fmt.Sprintf("appenders=%d", k), func(b *testing.B) {
			s, _ := benchStore(b)
			mustAppend(b, s, "/bench", ev("warm"))
			c0 := s.k.Commits()
			b.ResetTimer()
			d := appendConcurrently(b, s, b.N, k)
			b.ReportMetric(float64(b.N)/d.Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/float64(s.k.Commits()-c0), "events/commit")
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
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	mustAppend(b, s, "/bench", ev("warm")) // creates the stream row (id 1) like the store run
	s.Close(context.Background())
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
	p, err := prepareInputs([]foldtype.EventInput{{Type: "bench/event", Payload: benchPayload}})
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
	c0 := s.k.Commits()
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
	b.ReportMetric(float64(b.N)/float64(s.k.Commits()-c0), "events/commit")
	b.ReportMetric(storeRate, "events/s")
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(storeRate/rawRate, "store/raw")
}

// BenchmarkAppendBesideHugeRecords measures single-message protocol appends to one stream, alone
// and while another stream takes 8 MiB byte records and 100,000-message JSON POSTs back to back.
// It reports the small appends' p50 and p99 latency: a huge record costs the others at most the
// time of its own commit, never a slower b-tree for every later append.
func BenchmarkAppendBesideHugeRecords(b *testing.B) {
	appendBesideHugeRecords(b, func(b *testing.B) *Store { s, _ := benchStore(b); return s })
}

// BenchmarkAppendBesideHugeRecordsPostgres is BenchmarkAppendBesideHugeRecords on PostgreSQL
// (FOLDSTREAM_TEST_POSTGRES, a fresh schema per run).
func BenchmarkAppendBesideHugeRecordsPostgres(b *testing.B) {
	appendBesideHugeRecords(b, func(b *testing.B) *Store { return openPGStore(b, pgtest.URL(b)) })
}

func appendBesideHugeRecords(b *testing.B, open func(b *testing.B) *Store) {
	for _, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-huge"
		}
		b.Run(name, func(b *testing.B) {
			s := open(b)
			ctx := context.Background()
			for _, p := range []string{"/small", "/huge-json"} {
				if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: p, ContentType: "application/json"}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/huge-bytes", ContentType: "application/octet-stream"}); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			var bg sync.WaitGroup
			var huge int
			if beside {
				big := make([]byte, 8<<20)
				var arr strings.Builder
				arr.WriteByte('[')
				for i := range 100_000 {
					if i > 0 {
						arr.WriteByte(',')
					}
					fmt.Fprintf(&arr, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 180))
				}
				arr.WriteByte(']')
				msgs := []byte(arr.String())
				bg.Add(1)
				go func() {
					defer bg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						req := AppendRequest{Path: "/huge-bytes", ContentType: "application/octet-stream", Body: big}
						if i%2 == 1 {
							req = AppendRequest{Path: "/huge-json", ContentType: "application/json", Body: msgs}
						}
						if _, err := s.Protocol().AppendRecord(ctx, req); err != nil {
							b.Error(err)
							return
						}
						huge++
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/small", ContentType: "application/json", Body: []byte(`{"n":1}`)}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			close(stop)
			bg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(huge), "huge-records")
		})
	}
}

// BenchmarkCatchUpRead reads a JSON stream of 64 MiB (320,000 messages of 200 bytes, written as
// records of 500) from the start to the tail in 1 MiB pages, as a catch-up GET does, and reports
// the rate and how far the Go heap grew above its level before the read (sampled after every
// page): the read's memory is bounded by its page, not by the stream.
func BenchmarkCatchUpRead(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/big", ContentType: "application/json"}); err != nil {
		b.Fatal(err)
	}
	var batch strings.Builder
	batch.WriteByte('[')
	for i := range 500 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"id":"m%07d","pad":"%s"}`, i, strings.Repeat("x", 170))
	}
	batch.WriteByte(']')
	body := []byte(batch.String())
	const records = 640
	for range records {
		if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/big", ContentType: "application/json", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	var ms runtime.MemStats
	b.ResetTimer()
	var peak uint64
	msgs := 0
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		after := int64(0)
		for pages := 0; ; pages++ {
			r, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/big", After: after})
			if err != nil {
				b.Fatal(err)
			}
			msgs += r.Count
			if pages%16 == 0 {
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > base {
					peak = max(peak, ms.HeapAlloc-base)
				}
			}
			if r.UpToDate {
				break
			}
			after = r.Next
		}
	}
	b.StopTimer()
	if msgs != b.N*records*500 {
		b.Fatalf("read %d messages, want %d", msgs, b.N*records*500)
	}
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(peak)/(1<<20), "heap-growth-MiB")
}

// BenchmarkManyStreams measures the protocol view's many-streams figures in process, on a real
// file with synchronous=FULL, 16 concurrent callers: creating b.N fresh JSON streams (streams/s),
// and producer batches of 100 messages spread over N streams (messages/s; one producer per
// stream), 100 streams against 100,000. cpu-µs/op is the process's CPU time (user + system) per
// stream or message, steadier than the rates on a shared machine. Run with
//
//	go test -run '^$' -bench ManyStreams -benchtime 20000x -count 3 ./stream
func BenchmarkManyStreams(b *testing.B) {
	ctx := context.Background()
	create := func(b *testing.B, s *Store, prefix string, n int) {
		b.Helper()
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: fmt.Sprintf("%s/%d", prefix, i), ContentType: "application/json"}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.Run("create", func(b *testing.B) {
		s, _ := benchStore(b)
		b.ResetTimer()
		start, cpu := time.Now(), cpuTime()
		create(b, s, "/c", b.N)
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "streams/s")
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	msg := fmt.Sprintf(`{"user":"u-12345","note":%q,"n":42}`, strings.Repeat("x", 150))
	batch := []byte("[" + strings.Repeat(msg+",", 99) + msg + "]")
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("producers/streams=%d", n), func(b *testing.B) {
			s, _ := benchStore(b)
			create(b, s, "/p", n)
			b.ResetTimer()
			start, cpu := time.Now(), cpuTime()
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Sender w owns the streams k ≡ w (mod 16), so each producer's requests go
					// one at a time, in order.
					seqs := make(map[int]int64)
					k := w
					for i := w; i < b.N; i += 16 {
						_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: fmt.Sprintf("/p/%d", k), ContentType: "application/json",
							Body: batch, Producer: &ProducerHeaders{ID: "p", Seq: seqs[k]}})
						if err != nil {
							b.Errorf("/p/%d seq %d: %v", k, seqs[k], err)
							return
						}
						seqs[k]++
						if k += 16; k >= n {
							k = w
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "messages/s")
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N*100), "cpu-µs/op")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreamFootprint measures what many streams cost at rest: it creates b.N empty JSON
// streams through the protocol view (16 concurrent callers, a real file, synchronous=FULL), then
// reports the Go heap after a collection per stream (heap-B/stream: the writer's cache of at most
// DefaultMaxCachedStreams streams and its wake marks, among the rest), the process's resident
// memory per stream (rss-B/stream, SQLite's own page cache included) and the database file with
// its WAL per stream (disk-B/stream), then the same after one 200-byte message appended to each
// stream (…-1msg). Run with
//
//	go test -run '^$' -bench StreamFootprint -benchtime 1000000x ./stream
func BenchmarkStreamFootprint(b *testing.B) {
	ctx := context.Background()
	s, path := benchStore(b)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss0 := residentBytes()
	each := func(fn func(i int) error) {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < b.N; i += 16 {
					if err := fn(i); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	report := func(suffix string) {
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := float64(b.N)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/stream"+suffix)
		b.ReportMetric(float64(residentBytes()-rss0)/n, "rss-B/stream"+suffix)
		var disk int64
		for _, f := range []string{path, path + "-wal"} {
			if fi, err := os.Stat(f); err == nil {
				disk += fi.Size()
			}
		}
		b.ReportMetric(float64(disk)/n, "disk-B/stream"+suffix)
	}
	b.ResetTimer()
	each(func(i int) error {
		_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: fmt.Sprintf("/f/%d", i), ContentType: "application/json"})
		return err
	})
	b.StopTimer()
	report("")
	msg := []byte(fmt.Sprintf(`[{"user":"u-12345","note":%q,"n":42}]`, strings.Repeat("x", 160)))
	each(func(i int) error {
		_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: fmt.Sprintf("/f/%d", i), ContentType: "application/json", Body: msg})
		return err
	})
	report("-1msg")
}

// residentBytes is the process's resident set size (Linux; 0 elsewhere).
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(data), &size, &rss); err != nil {
		return 0
	}
	return rss * int64(os.Getpagesize())
}

// BenchmarkPostgresAppendsToSeparateStreams runs 16 writers, each appending single-message
// protocol batches to its own stream, on PostgreSQL (FOLDSTREAM_TEST_POSTGRES), and reports where
// a group's time goes: appends per commit, write round trips per commit, the COMMIT's own time
// (its round trip and WAL flush) and the whole group's time (elapsed over commits).
func BenchmarkPostgresAppendsToSeparateStreams(b *testing.B) {
	s := openPGStore(b, pgtest.URL(b))
	d, ok := s.drv.(*pgdriver.Driver)
	if !ok {
		b.Fatal("not a PostgreSQL store")
	}
	ctx := context.Background()
	const k = 16
	for w := range k {
		if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: fmt.Sprintf("/s%d", w), ContentType: "application/json"}); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var commitTime time.Duration
	stop := s.ObserveCommits(func(c CommitStats) {
		mu.Lock()
		commitTime += c.Duration
		mu.Unlock()
	})
	defer stop()
	c0, t0 := s.k.Commits(), testhooks.PGWriteRoundTrips(d)
	mu.Lock()
	commitTime = 0
	mu.Unlock()
	b.ResetTimer()
	start := time.Now()
	inShares(b.N, k, func(w, share int) {
		req := AppendRequest{Path: fmt.Sprintf("/s%d", w), ContentType: "application/json", Body: []byte(`{"n":1}`)}
		for range share {
			if _, err := s.Protocol().AppendRecord(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	commits := float64(s.k.Commits() - c0)
	mu.Lock()
	ct := commitTime
	mu.Unlock()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(b.N)/commits, "appends/commit")
	b.ReportMetric(float64(testhooks.PGWriteRoundTrips(d)-t0)/commits, "trips/commit")
	b.ReportMetric(float64(ct.Microseconds())/1000/commits, "commit-ms")
	b.ReportMetric(float64(elapsed.Microseconds())/1000/commits, "group-ms")
}

// BenchmarkPostgresEphemeralAppends appends one ephemeral event per op (a live-state delta's
// shape) on PostgreSQL (FOLDSTREAM_TEST_POSTGRES): from one writer, whose every op waits for its
// commit, and from 16 writers on 16 streams, whose batches the group commit joins. Each batch takes
// its offsets from the stream's logged sequence, so its commit waits for the WAL flush
// (docs/postgres.md#ephemeral-events).
func BenchmarkPostgresEphemeralAppends(b *testing.B) {
	for _, k := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", k), func(b *testing.B) {
			s := openPGStore(b, pgtest.URL(b))
			ctx := context.Background()
			for w := range k {
				if _, err := s.Events().Stream(fmt.Sprintf("/e%d", w)).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			inShares(b.N, k, func(w, share int) {
				st := s.Events().Stream(fmt.Sprintf("/e%d", w))
				for range share {
					if _, err := st.Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true, Payload: foldtype.JSON(map[string]int{"n": 1})}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkPostgresFencedAppends measures what the lease fence costs a processor's emitted
// events on PostgreSQL: appends of one durable event, by k writers to streams of their own, plain
// (fence=off) and fenced by a lease held at its generation (fence=on: the check reads the lease
// row FOR SHARE inside the append's transaction). Run it with e.g.
//
//	go test -run '^$' -bench PostgresFencedAppends -benchtime 2000x -count 5 ./stream
func BenchmarkPostgresFencedAppends(b *testing.B) {
	for _, fenced := range []bool{false, true} {
		for _, k := range []int{1, 16} {
			b.Run(fmt.Sprintf("fence=%s/writers=%d", map[bool]string{false: "off", true: "on"}[fenced], k), func(b *testing.B) {
				s := openPGStore(b, pgtest.URL(b))
				ctx := context.Background()
				streams := make([]*EventStream, k)
				for w := range k {
					path := fmt.Sprintf("/f%d", w)
					streams[w] = s.Events().Stream(path)
					if _, err := streams[w].Append(ctx, foldtype.EventInput{Type: "made"}); err != nil {
						b.Fatal(err)
					}
					if fenced {
						l, ok, err := s.Driver().AcquireLease(ctx, "lease"+path, "bench", "", time.Hour)
						if err != nil || !ok {
							b.Fatalf("acquire: %v %v", ok, err)
						}
						streams[w] = streams[w].Fenced(l.Key, l.Generation)
					}
					streams[w] = streams[w].ForProcessor("p")
				}
				b.ResetTimer()
				start := time.Now()
				inShares(b.N, k, func(w, share int) {
					for range share {
						if _, err := streams[w].Append(ctx, foldtype.EventInput{Type: "done", Payload: foldtype.JSON(map[string]int{"n": 1})}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			})
		}
	}
}

// inShares runs fn on k goroutines at once, worker w with its share of n ops (the first n%k get
// one more), and waits for them all.
func inShares(n, k int, fn func(w, share int)) {
	var wg sync.WaitGroup
	for w := range k {
		share := n / k
		if w < n%k {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, share)
		}()
	}
	wg.Wait()
}

// producerBatchBody is a dsbench producer batch: a JSON array of n messages of about 200 bytes.
func producerBatchBody(n int) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"id":"dsbench#%010d","kind":"bench","pad":"%s"}`, i, bytes.Repeat([]byte("x"), 140))
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

// BenchmarkProducerBatch appends idempotent-producer batches of 100 messages of about 200 bytes
// (the dsbench producer scenario's requests) one after the other to a file store (WAL,
// synchronous=FULL): the store's share of a producer POST — split, checks, insert, commit —
// without HTTP. One op is one batch; cpu-µs/msg is the process's CPU per message.
func BenchmarkProducerBatch(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		b.Fatal(err)
	}
	body := producerBatchBody(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	seq := int64(0)
	cpu0 := cpuTime()
	for b.Loop() {
		req := AppendRequest{Path: "/p", ContentType: "application/json", Body: bytes.Clone(body),
			Producer: &ProducerHeaders{ID: "bench", Epoch: 0, Seq: seq}}
		if _, err := s.Protocol().AppendRecord(ctx, req); err != nil {
			b.Fatal(err)
		}
		seq++
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(seq*100), "cpu-µs/msg")
}
