package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// BenchmarkCreateOverHTTP creates b.N fresh JSON streams with 16 concurrent PUTs over loopback
// HTTP/1.1 keep-alive (httptest.Server, net/http's client) against a store on a real SQLite file
// with synchronous=FULL, as `foldstream serve` opens it and as dsbench's many-streams creation
// drives it. It reports streams/s and the process's CPU per stream (cpu-µs/op: server and client
// together, both in this process), the creates per group commit and a commit's mean duration
// (its fsync) beside the usual allocation counts. The server has metrics on, as `foldstream serve`.
func BenchmarkCreateOverHTTP(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"),
		storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	var commits, commitNs atomic.Int64
	stop := st.ObserveCommits(func(c stream.CommitStats) {
		commits.Add(1)
		commitNs.Add(int64(c.Duration))
	})
	defer stop()
	srv := newServer(b, st, server.Config{Logger: quiet, Metrics: server.NewMetrics()})
	defer srv.Shutdown(context.Background())
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	defer client.CloseIdleConnections()

	const creators = 16
	base := hs.URL + "/v1/stream/bench-create-"
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	commits.Store(0)
	commitNs.Store(0)
	start, cpu := time.Now(), processCPU()
	var wg sync.WaitGroup
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				req, err := http.NewRequest(http.MethodPut, base+fmt.Sprint(i), nil)
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("PUT %d: %s", i, resp.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "streams/s")
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	if n := commits.Load(); n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "creates/commit")
		b.ReportMetric(float64(commitNs.Load())/float64(n)/1e3, "commit-µs")
	}
}

// processCPU is the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
