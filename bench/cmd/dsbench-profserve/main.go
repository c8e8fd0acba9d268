// Command dsbench-profserve serves foldstream exactly as `foldstream serve` does (same store
// options, same handler configuration) and writes CPU and blocking profiles of the run. It exists
// for the benchmark only, so that the harness can profile the server under its own load without
// profiling hooks in the server. Give it to dsbench in place of the foldstream binary:
//
//	go build -o /tmp/profserve ./bench/cmd/dsbench-profserve
//	go run ./bench/cmd/dsbench -foldstream /tmp/profserve \
//	    -foldstream-args "--cpuprofile /tmp/cpu.prof --blockprofile /tmp/block.prof" -only producers
//	go tool pprof -top /tmp/profserve /tmp/cpu.prof
//
// Add "--trace FILE" for an execution trace; `go tool trace -pprof=syscall FILE` then shows where
// the writer waits in fsync. The profiles cover the whole life of the process and are written on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"github.com/foldstream/foldstream/internal/heapfloor"
	"github.com/foldstream/foldstream/internal/spanbatch"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
	"github.com/foldstream/foldstream/subscriptions"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:] // accept the `foldstream serve ...` command line unchanged
	}
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench-profserve:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("dsbench-profserve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4437", "address to listen on")
	db := fs.String("db", "foldstream.db", "SQLite file of the stream store")
	longPoll := fs.Duration("long-poll-timeout", server.DefaultLongPollTimeout, "long-poll timeout and SSE keep-alive interval")
	sync := fs.String("sync", "FULL", "SQLite synchronous mode: FULL or NORMAL")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	blockProfile := fs.String("blockprofile", "", "write a blocking profile (where goroutines wait) to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile to this file")
	memProfile := fs.String("memprofile", "", "write the heap's allocation profile at the end of the run to this file (go tool pprof -sample_index alloc_objects)")
	heapFloor := fs.Int("gc-heap-floor-mib", heapfloor.DefaultFloor>>20, "as foldstream serve's --gc-heap-floor-mib")
	traceDiscard := fs.Bool("trace-discard", false, "record every span (server.Config.TracerProvider, always sampled, batched as serve's exporter is) into an exporter that discards them: what tracing costs the server without a collector")
	traceFile := fs.String("trace", "", "write an execution trace to this file (go tool trace -pprof=syscall shows time in fsync)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			return err
		}
		defer func() {
			trace.Stop()
			f.Close()
		}()
	}
	if *blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond)) // one sample per 10 µs blocked
		defer writeProfile("block", *blockProfile)
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096 // finer than the default 512 KiB: small per-request allocations show
		defer writeProfile("allocs", *memProfile)
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		defer writeProfile("mutex", *mutexProfile)
	}

	defer heapfloor.Start(uint64(max(*heapFloor, 0)) << 20)()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := storeopen.Open(context.Background(), *db, storeopen.Config{Store: stream.Config{Logger: log}, SQLite: sqlitedriver.Config{Synchronous: *sync}})
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	cfg := server.Config{LongPollTimeout: *longPoll, Logger: log}
	if *traceDiscard {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(spanbatch.New(discardSpans{}, spanbatch.Options{BatchTimeout: time.Second})))
		defer tp.Shutdown(context.Background())
		cfg.TracerProvider = tp
	}
	h, err := server.New(st, cfg)
	if err != nil {
		return err
	}
	// The subscription delivery loop `foldstream serve` runs beside the server.
	delivery := subscriptions.StartDelivery(st, subscriptions.DeliveryConfig{Logger: log})
	defer delivery.Shutdown(context.Background())
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// discardSpans is a span exporter that keeps nothing.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsbench-profserve:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench-profserve:", err)
	}
}
