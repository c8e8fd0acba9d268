package stream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// The writer keeps at most Config.MaxCachedStreams streams in memory; a stream evicted from it
// is read again from its row. These run many streams through a cache of two, concurrently, on both
// drivers, and check that offsets, producer dedup and wake records stay exact.

func openCached(t *testing.T, target string, max int) *stream.Store {
	t.Helper()
	s, err := storeopen.Open(context.Background(), target, storeopen.Config{Store: stream.Config{Logger: quiet, MaxCachedStreams: max, ProducerReorderWait: -1}})
	if err != nil {
		t.Fatalf("open %s: %v", target, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func cacheTargets(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "c.db") },
		"postgres": func(t *testing.T) string { return pgtest.URL(t) },
	}
}

func TestEvictedStreamsKeepExactOffsetsAndProducerDedup(t *testing.T) {
	for name, target := range cacheTargets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openCached(t, target(t), 2)
			const streams, seqs = 10, 15
			for i := range streams {
				if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: fmt.Sprintf("/c/%d", i), ContentType: "application/json"}); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for i := range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := fmt.Sprintf("/c/%d", i)
					tail := int64(0)
					for seq := range int64(seqs) {
						body := fmt.Sprintf(`[{"s":%d},{"s":%d}]`, seq, seq)
						req := stream.AppendRequest{Path: path, ContentType: "application/json", Body: []byte(body),
							Producer: &stream.ProducerHeaders{ID: "p", Epoch: 0, Seq: seq}}
						res, err := s.Protocol().AppendRecord(ctx, req)
						if err != nil || res.Duplicate || res.Tail != tail+2 {
							errs <- fmt.Errorf("%s seq %d: got %+v %v, want tail %d, not a duplicate", path, seq, res, err, tail+2)
							return
						}
						tail = res.Tail
						// The same request again, after other streams pushed this one out of the cache.
						res, err = s.Protocol().AppendRecord(ctx, req)
						if err != nil || !res.Duplicate || res.Tail != tail {
							errs <- fmt.Errorf("%s seq %d resent: got %+v %v, want a duplicate at tail %d", path, seq, res, err, tail)
							return
						}
						// A gap is still a gap.
						gap := req
						gap.Producer = &stream.ProducerHeaders{ID: "p", Epoch: 0, Seq: seq + 2}
						if _, err := s.Protocol().AppendRecord(ctx, gap); err == nil {
							errs <- fmt.Errorf("%s seq %d: a gap was accepted", path, seq+2)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for i := range streams {
				path := fmt.Sprintf("/c/%d", i)
				r, err := s.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				var got []struct{ S int64 }
				if err := json.Unmarshal(r.Body, &got); err != nil {
					t.Fatalf("%s: %v in %s", path, err, r.Body)
				}
				if len(got) != 2*seqs || r.Next != 2*seqs {
					t.Fatalf("%s: %d messages up to %d, want %d", path, len(got), r.Next, 2*seqs)
				}
				for k, m := range got {
					if m.S != int64(k/2) {
						t.Fatalf("%s: message %d is seq %d, want %d", path, k, m.S, k/2)
					}
				}
			}
			if n := stream.CachedStreams(s); n > 2 {
				t.Fatalf("the writer caches %d streams, want at most 2", n)
			}
		})
	}
}

func TestEvictedStreamsKeepEphemeralOffsetsAndOneWakePerIncarnation(t *testing.T) {
	for name, target := range cacheTargets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openCached(t, target(t), 2)
			const streams, rounds = 8, 10
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			durable := make([][]int64, streams)
			for i := range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := fmt.Sprintf("/e/%d", i)
					woken, err := s.Events().Wake(ctx, path, stream.WakeRequest)
					if err != nil || len(woken) != 2 {
						errs <- fmt.Errorf("%s: first wake appended %d records (%v), want the birth batch", path, len(woken), err)
						return
					}
					last := woken[len(woken)-1].Offset
					durable[i] = append(durable[i], woken[0].Offset, woken[1].Offset)
					for r := range rounds {
						got, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "d"})
						if err != nil {
							errs <- err
							return
						}
						// An ephemeral-only batch: its offset lives only in the writer's memory.
						e, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "x", Ephemeral: true})
						if err != nil {
							errs <- err
							return
						}
						got = append(got, e...)
						for _, e := range got {
							if e.Offset <= last {
								errs <- fmt.Errorf("%s round %d: offset %d after %d", path, r, e.Offset, last)
								return
							}
							last = e.Offset
							if !e.Ephemeral {
								durable[i] = append(durable[i], e.Offset)
							}
						}
						if again, err := s.Events().Wake(ctx, path, stream.WakeRequest); err != nil || len(again) != 0 {
							errs <- fmt.Errorf("%s round %d: a second wake appended %d records (%v), want none", path, r, len(again), err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for i := range streams {
				path := fmt.Sprintf("/e/%d", i)
				page, err := s.Events().Stream(path).Read(ctx, 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				var offs []int64
				for _, e := range page.Events {
					offs = append(offs, e.Offset)
				}
				if fmt.Sprint(offs) != fmt.Sprint(durable[i]) {
					t.Fatalf("%s: the log holds offsets %v, the appends returned %v", path, offs, durable[i])
				}
			}
			// Streams whose last offset was ephemeral stay cached; once a durable append follows,
			// they may go.
			for i := range streams {
				if _, err := s.Events().Stream(fmt.Sprintf("/e/%d", i)).Append(ctx, foldtype.EventInput{Type: "d"}); err != nil {
					t.Fatal(err)
				}
			}
			if n := stream.CachedStreams(s); n > 2 {
				t.Fatalf("the writer caches %d streams, want at most 2", n)
			}
		})
	}
}
