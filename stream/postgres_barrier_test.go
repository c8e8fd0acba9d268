package stream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/testhooks"
)

// TestPostgresLiveReadsFromTheTailCacheShareOneListenBarrier: node B's live readers of a stream
// are answered from its tail cache once B heard node A's commit, and each such answer (data that
// claims the tail) waits for the listen barrier first. Readers woken by the same commit share its
// markers — a few rounds, not one per reader — and an answer without data (a reader at the tail)
// sends none.
func TestPostgresLiveReadsFromTheTailCacheShareOneListenBarrier(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPGStore(t, url), openPGStore(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	markers := func() uint64 { return testhooks.PGListenMarkers(b.Driver()) }
	if _, err := a.Events().Stream("/bar").Append(ctx, foldtype.EventInput{Type: "m"}); err != nil {
		t.Fatal(err)
	}
	// B hears A's first commit before it reads: a notification of it that came after the read
	// would wake the reader below as if B had heard the next one.
	if err := b.listenBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	base := markers()
	// A reader at the tail: B reads the database, seeds its cache, and waits.
	first, err := b.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bar", After: 1, Watch: true})
	if err != nil || first.Count != 0 {
		t.Fatalf("first read: %+v %v", first, err)
	}
	if n := markers() - base; n != 0 {
		t.Fatalf("%d markers for reads without data, want none", n)
	}
	// Each round: A appends, B hears it, and 32 readers from before that event start together
	// (a gate), so those that arrive while a marker is out wait for the next one. The cache may
	// drop its entry between rounds (a commit whose records did not travel): then the readers
	// were answered from the database, with no barrier to share, and the round is run again.
	const readers = 32
	after := int64(1)
	for round := 1; ; round++ {
		evs, err := a.Events().Stream("/bar").Append(ctx, foldtype.EventInput{Type: "m"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-first.Changed:
		case <-ctx.Done():
			t.Fatal("B never heard A's commit")
		}
		// The wake may have come from something else (the listener's "anything may have
		// changed"): B hears this commit for sure once a barrier sent after it came back.
		if err := b.listenBarrier(ctx); err != nil {
			t.Fatal(err)
		}
		want := evs[0].Offset
		cachedBefore, markersBefore := testhooks.StoreCachedReads(b), markers()
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		gate := make(chan struct{})
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				res, err := b.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bar", After: after, Watch: true})
				if err == nil && (res.Count != 1 || !res.UpToDate || res.Next != want) {
					err = foldtype.NewError(foldtype.CodeInternal, nil, "read %+v, want the event at %d up to date", res, want)
				}
				errs <- err
			}()
		}
		close(gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		cached := testhooks.StoreCachedReads(b) - cachedBefore
		n := markers() - markersBefore
		if cached == 0 && round < 5 {
			// Seed the cache again with a reader at the new tail.
			first, err = b.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bar", After: want, Watch: true})
			if err != nil || first.Count != 0 {
				t.Fatalf("reseed: %+v %v", first, err)
			}
			after = want
			continue
		}
		// Half the readers: a loaded machine schedules the goroutines in bursts, and a marker's
		// round trip can end before a burst's last reader asked.
		if cached == 0 || n == 0 || n > uint64(cached)/2 {
			t.Fatalf("%d markers for %d readers answered from the cache (of %d), want at least one, shared", n, cached, readers)
		}
		return
	}
}
