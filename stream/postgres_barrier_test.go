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
	// A reader at the tail: B reads the database, seeds its cache, and waits.
	first, err := b.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bar", After: 1, Watch: true})
	if err != nil || first.Count != 0 {
		t.Fatalf("first read: %+v %v", first, err)
	}
	if n := markers(); n != 0 {
		t.Fatalf("%d markers for reads without data, want none", n)
	}
	if _, err := a.Events().Stream("/bar").Append(ctx, foldtype.EventInput{Type: "m"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Changed:
	case <-ctx.Done():
		t.Fatal("B never heard A's commit")
	}
	const readers = 32
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bar", After: 1, Watch: true})
			if err == nil && (res.Count != 1 || !res.UpToDate || res.Next != 2) {
				err = foldtype.NewError(foldtype.CodeInternal, nil, "read %+v, want the second event up to date", res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := markers(); n == 0 || n > readers/4 {
		t.Fatalf("%d markers for %d readers answered from the cache, want at least one, shared", n, readers)
	}
}
