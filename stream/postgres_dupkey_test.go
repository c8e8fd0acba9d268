package stream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream"
)

// TestPostgresNodesAppendingToSharedStreamsNeverCollideOnAnOffset runs three nodes (stores on one
// schema) whose writers group appends — plain, producer and processor (event view) appends, and
// processors' checkpoint writes — to a few shared streams, so a group often meets a stream another
// node holds and splits its transaction (docs/postgres.md#writes-round-trips). Every write must
// succeed, and each stream's offsets must stay unique and gapless.
func TestPostgresNodesAppendingToSharedStreamsNeverCollideOnAnOffset(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	nodes := []*stream.Store{openPG(t, url), openPG(t, url), openPG(t, url)}
	ctx := context.Background()
	paths := []string{"/a", "/b", "/c"}
	for _, p := range paths {
		if _, err := nodes[0].Protocol().CreateStream(ctx, stream.CreateRequest{Path: p, ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
	}
	const workers, per = 4, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := make(map[string]int)
	for n, s := range nodes {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				producer := fmt.Sprintf("p-%d-%d", n, w)
				cps := make(map[string]*stream.Checkpoints)
				for _, p := range paths {
					c, err := s.Events().Checkpoints(ctx, p)
					if err != nil {
						t.Error(err)
						return
					}
					cps[p] = c
				}
				seqs := make(map[string]int64)
				for i := range per {
					p := paths[(i+w+n)%len(paths)]
					var err error
					switch i % 4 {
					case 0:
						_, err = s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(i)})
					case 1:
						_, err = s.Events().Stream(p).ForProcessor("proc").Append(ctx, foldtype.EventInput{Type: "v", Payload: foldtype.JSON(i)})
					case 2:
						// A checkpoint write checks its stream's row (under the stream's lock when
						// that is free), then an append in the same group follows.
						scope := paths[(i+w+n+1)%len(paths)]
						if err = cps[scope].WriteCheckpoint(ctx, producer, foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: int64(i)}, false); err != nil {
							break
						}
						_, err = s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(i)})
					default:
						_, err = s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: p, ContentType: "application/json",
							Body:     []byte(fmt.Sprintf(`{"n":%d}`, i)),
							Producer: &stream.ProducerHeaders{ID: producer, Epoch: 0, Seq: seqs[p]}})
						seqs[p]++
					}
					if err != nil {
						t.Errorf("node %d: append to %s: %v", n, p, err)
						return
					}
					mu.Lock()
					want[p]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, p := range paths {
		page, err := nodes[1].Events().Stream(p).Read(ctx, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != want[p] {
			t.Fatalf("%s holds %d events, want %d", p, len(page.Events), want[p])
		}
		for i, ev := range page.Events {
			if ev.Offset != int64(i+1) {
				t.Fatalf("%s: event %d has offset %d: offsets must be unique and gapless across nodes", p, i, ev.Offset)
			}
		}
	}
}
