package server

import (
	"context"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/foldstream/foldstream/internal/spanbatch"
	"github.com/foldstream/foldstream/stream"
)

// discardSpans is a span exporter that keeps nothing.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkSpansOfAnAppend runs only the tracing work of one served append — the request span
// started and ended, the append span under it, the trace context written into a copy of the
// provenance rules — with every span recorded and batched into an exporter that discards them,
// once with the SDK's batch span processor (sdktrace.WithBatcher) and once with the one a node
// uses (internal/spanbatch). The store's work is left out, so what is measured is the spans' own
// cost; "serial" ends the spans from one goroutine, leaving the other cores idle as a server
// below its limit does, "parallel" from eight.
func BenchmarkSpansOfAnAppend(b *testing.B) {
	for _, bc := range []struct {
		name string
		sp   func() sdktrace.SpanProcessor
	}{
		{"sdk-batcher", func() sdktrace.SpanProcessor {
			return sdktrace.NewBatchSpanProcessor(discardSpans{}, sdktrace.WithBatchTimeout(time.Second))
		}},
		{"spanbatch", func() sdktrace.SpanProcessor {
			return spanbatch.New(discardSpans{}, spanbatch.Options{BatchTimeout: time.Second})
		}},
	} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(bc.sp()))
		s := &Server{cfg: Config{Prefix: DefaultPrefix}, tracer: tp.Tracer(tracerName)}
		prov := &stream.Provenance{ReservedKeyPrefix: reservedKeyPrefix}
		req := httptest.NewRequest("POST", "http://127.0.0.1"+DefaultPrefix+"bench", nil)
		one := func() {
			r, span := s.startRequestSpan(req)
			ctx, as := s.startAppendSpan(r.Context())
			if tracedProvenance(ctx, prov) == prov {
				b.Fatal("no trace context written")
			}
			endAppendSpan(as, "bench", 200, 42, nil)
			s.endRequestSpan(span, r, "request-id", 204)
		}
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			began := cpuTime()
			for b.Loop() {
				one()
			}
			b.ReportMetric(float64((cpuTime()-began).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4) // 8 goroutines on 2 cores
			began := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					one()
				}
			})
			b.ReportMetric(float64((cpuTime()-began).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
		if err := tp.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the user and system CPU time this process used so far: on a machine shared with
// other work, wall time mostly measures the wait for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
