package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// BenchmarkPatternFold measures events/s from append to every effect having run, for a pattern
// processor (cap 100 open engines) over 10,000 and 100,000 streams against the same events on one
// stream: b.N events appended in batches of 10 by 16 appenders to a real file, batch i to stream
// i mod N (so b.N/10 batches touch min(N, b.N/10) streams). cpu-µs/event is the process's user +
// system time over the same span, per event (with -cpu 1 the work done, on a loaded machine the
// figure to compare); commits/batch and writes/batch are the store's group commits and the writes
// they made durable over the span, per batch appended, and µs/commit their mean duration (the
// COMMIT itself: its WAL writes and fsync). Run with
//
//	go test -run '^$' -bench PatternFold -benchtime 100000x -count 3 ./host
//
// and with -benchtime 1000000x for every one of the 100,000 streams to get a batch.
func BenchmarkPatternFold(b *testing.B) {
	for _, n := range []int{1, 10_000, 100_000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, err := storeopen.Open(context.Background(), filepath.Join(b.TempDir(), "fold.db"), storeopen.Config{Store: stream.Config{Logger: quietLog}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			h, err := host.New(s, host.Config{Logger: quietLog, MaxOpenEngines: 100})
			if err != nil {
				b.Fatal(err)
			}
			p := newCarts(b, "carts")
			if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
				b.Fatal(err)
			}
			batches := max(b.N/10, 1)
			per := make([]int, n) // items per stream
			for i := range batches {
				per[i%n] += 10
			}
			var dones []<-chan struct{}
			for i, k := range per {
				if k > 0 {
					dones = append(dones, p.expect(fmt.Sprintf("/carts/%d", i), k))
				}
			}
			batch := make([]foldtype.EventInput, 10)
			for i := range batch {
				batch[i] = item(1)
			}
			var commits, writes, commitNs atomic.Int64
			stop := s.ObserveCommits(func(c stream.CommitStats) {
				commits.Add(1)
				writes.Add(int64(c.Writes))
				commitNs.Add(int64(c.Duration))
			})
			b.ResetTimer()
			start, cpu := time.Now(), processCPU(b)
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < batches; i += 16 {
						if _, err := s.Events().Stream(fmt.Sprintf("/carts/%d", i%n)).Append(ctx, batch...); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, d := range dones {
				<-d
			}
			d, used := time.Since(start), processCPU(b)-cpu
			b.StopTimer()
			stop()
			b.ReportMetric(float64(batches*10)/d.Seconds(), "events/s")
			b.ReportMetric(float64(used.Microseconds())/float64(batches*10), "cpu-µs/event")
			b.ReportMetric(float64(commits.Load())/float64(batches), "commits/batch")
			b.ReportMetric(float64(writes.Load())/float64(batches), "writes/batch")
			b.ReportMetric(float64(commitNs.Load())/1e3/float64(max(commits.Load(), 1)), "µs/commit")
			if err := h.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkOpenEngine measures, for a pattern processor, the heap one open engine holds
// (bytes/engine, from 1,000 engines opened by reads) and the time to reopen an evicted engine:
// with a cap of one, each read alternates between two streams, so every read closes one engine
// and reopens the other from its checkpoint (ns/op). Run with
//
//	go test -run '^$' -bench OpenEngine -benchtime 2000x -count 3 ./host
func BenchmarkOpenEngine(b *testing.B) {
	ctx := context.Background()
	b.Run("heap-per-engine", func(b *testing.B) {
		s, err := storeopen.Open(context.Background(), filepath.Join(b.TempDir(), "open.db"), storeopen.Config{Store: stream.Config{Logger: quietLog}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(context.Background())
		const n = 1000
		for i := range n {
			if _, err := s.Events().Stream(fmt.Sprintf("/carts/%d", i)).Append(ctx, item(1)); err != nil {
				b.Fatal(err)
			}
		}
		h, err := host.New(s, host.Config{Logger: quietLog, MaxOpenEngines: 2 * n})
		if err != nil {
			b.Fatal(err)
		}
		p := newCarts(b, "carts")
		if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.ResetTimer()
		for i := range n {
			if _, err := h.Snapshot(ctx, fmt.Sprintf("/carts/%d", i), "carts"); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		open := 0
		for i := range n {
			if sts := h.ProcessorsOn(ctx, fmt.Sprintf("/carts/%d", i)); len(sts) == 1 && sts[0].Open {
				open++
			}
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(open), "bytes/engine")
		if err := h.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("reopen", func(b *testing.B) {
		s, err := storeopen.Open(context.Background(), filepath.Join(b.TempDir(), "reopen.db"), storeopen.Config{Store: stream.Config{Logger: quietLog}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(context.Background())
		for _, path := range []string{"/carts/a", "/carts/b"} {
			if _, err := s.Events().Stream(path).Append(ctx, item(1)); err != nil {
				b.Fatal(err)
			}
		}
		h, err := host.New(s, host.Config{Logger: quietLog, MaxOpenEngines: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := host.RegisterPattern(ctx, h, "/carts/*", newCarts(b, "carts")); err != nil {
			b.Fatal(err)
		}
		paths := []string{"/carts/a", "/carts/b"}
		b.ResetTimer()
		for i := range b.N {
			if _, err := h.Snapshot(ctx, paths[i%2], "carts"); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := h.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

// processCPU is the process's user + system time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
