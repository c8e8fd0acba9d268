package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// BenchmarkLiveStateSSEFanout measures the path of one live-state delta from the store to the
// processor's SSE readers: per op one delta (an ephemeral LiveStateChangedType event, as a
// LiveState appends it) reaches every reader's socket and is read by the client. A second
// processor on the same stream publishes a delta per op too, which no reader follows. Reported:
// allocations per delta per reader over the whole process (store, server and the readers' client
// side), and per delta for all readers together.
//
//	go test -run '^$' -bench LiveStateSSEFanout -benchmem ./server
func BenchmarkLiveStateSSEFanout(b *testing.B) {
	for _, readers := range []int{1, 16} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) { benchLiveFanout(b, readers) })
	}
}

func benchLiveFanout(b *testing.B, readers int) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	st, err := storeopen.Open(ctx, ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = h.Shutdown(ctx) }()
	c := foldstream.MustDefineContract(foldstream.ContractConfig[orderTotals]{Slug: "totals", Version: "1", Consumes: []string{"order.placed"}})
	if _, err := host.Register(ctx, h, "/orders", orderCounter{foldstream.NewBase(c)}); err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(newServer(b, st, server.Config{Processors: h, Logger: quiet, LongPollTimeout: time.Hour, MaxLiveReaders: -1}))
	defer ts.Close()
	live, err := h.LiveSnapshot(ctx, "/orders", "totals")
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, readers*64)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seeded := make(chan struct{}, readers)
	for range readers {
		req, _ := http.NewRequestWithContext(rctx, "GET", ts.URL+"/v1/processor/totals/orders?live=sse", nil)
		res, err := testClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		go func() { // counts SSE events (each ends with a blank line); the first is the seed
			buf := make([]byte, 64<<10)
			n, last := 0, byte(0)
			for {
				k, err := res.Body.Read(buf)
				for _, c := range buf[:k] {
					if c == '\n' && last == '\n' {
						if n++; n == 1 {
							seeded <- struct{}{}
						} else {
							got <- struct{}{}
						}
					}
					last = c
				}
				if err != nil {
					return
				}
			}
		}()
	}
	for range readers {
		<-seeded
	}
	delta := func(key string, from int64, n int) foldtype.EventInput {
		p := `{"key":"` + key + `","from":` + strconv.FormatInt(from, 10) + `,"to":` + strconv.FormatInt(from+1, 10) +
			`,"patch":[{"op":"replace","path":"/count","value":` + strconv.Itoa(n) + `}]}`
		return foldtype.EventInput{Type: foldtype.LiveStateChangedType, Ephemeral: true, Payload: []byte(p)}
	}
	rev := live.Rev
	var ms0, ms1 runtime.MemStats
	b.ResetTimer()
	runtime.ReadMemStats(&ms0)
	for i := range b.N {
		if _, err := st.Events().Stream("/orders").Append(ctx, delta("other", int64(i), i), delta("totals", rev, i)); err != nil {
			b.Fatal(err)
		}
		rev++
		for range readers {
			<-got
		}
	}
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	allocs := float64(ms1.Mallocs - ms0.Mallocs)
	b.ReportMetric(allocs/float64(b.N)/float64(readers), "allocs/delta/reader")
	b.ReportMetric(allocs/float64(b.N), "allocs/delta")
}
