package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

type benchState struct {
	N int `json:"n"`
}

type benchCounter struct{ foldstream.Base[benchState] }

func (p *benchCounter) Reduce(a foldstream.ReduceArgs[benchState]) (benchState, bool, error) {
	return benchState{N: a.State.N + 1}, true, nil
}

func (p *benchCounter) ProjectLiveState(benchState) (any, error) { return nil, nil }

// BenchmarkEndToEnd measures events/s from append to a processor's committed checkpoint: k
// appenders append b.N ~200-byte events (one per append) to a stream on a real file
// (synchronous=FULL) while a hosted processor folds them; the clock stops when the processor's
// checkpoint covers the last offset. Run with
//
//	go test -run '^$' -bench EndToEnd -benchtime 3000x -count 5 ./host
func BenchmarkEndToEnd(b *testing.B) {
	payload := foldtype.JSON(map[string]any{"user": "u-12345", "note": strings.Repeat("x", 100), "n": 42})
	for _, k := range []int{1, 16} {
		b.Run(fmt.Sprintf("appenders=%d", k), func(b *testing.B) {
			ctx := context.Background()
			s, err := storeopen.Open(context.Background(), filepath.Join(b.TempDir(), "e2e.db"), storeopen.Config{Store: stream.Config{Logger: quietLog}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			h := newHost(b, s)
			c, err := foldstream.DefineContract(foldstream.ContractConfig[benchState]{Slug: "count", Version: "1", Consumes: []string{"bench/event"}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := host.Register(ctx, h, "/e2e", &benchCounter{Base: foldstream.NewBase(c)}); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var last int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range k {
				share := b.N / k
				if w < b.N%k {
					share++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range share {
						got, err := s.Events().Stream("/e2e").Append(ctx, foldtype.EventInput{Type: "bench/event", Payload: payload})
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						last = max(last, got[0].Offset)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if err := h.WaitUntilProcessed(ctx, "/e2e", "count", last, time.Minute); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/d.Seconds(), "events/s")
			if err := h.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
