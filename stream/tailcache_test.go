package stream

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// liveStep waits for the watch of res to close and reads on from res.Next with Watch, as SSE does.
func liveStep(t *testing.T, s *Store, path string, res ReadResult) ReadResult {
	t.Helper()
	select {
	case <-res.Changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no wake after a commit", path)
	}
	next, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: path, After: res.Next, Watch: true})
	if err != nil {
		t.Fatalf("live read of %s: %v", path, err)
	}
	return next
}

// tailBytesConsistent checks the cache's byte count against its entries.
func tailBytesConsistent(t *testing.T, s *Store) {
	t.Helper()
	if err := s.k.TailCacheConsistent(); err != nil {
		t.Fatal(err)
	}
}

// On SQLite a live reader's wakes are answered from the bytes the writer committed, without a
// read of the database, and hold exactly what each commit appended.
func TestLiveReadsOnSQLiteComeFromTheCommittedBytes(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/live", "application/json")
	createStream(t, s, "/bytes", "application/octet-stream")
	res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/live", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	bres, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bytes", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	before := s.k.CachedReads()
	const n = 20
	for i := range n {
		msg := fmt.Sprintf(`{"i":%d}`, i)
		mustAppendRecord(t, s, AppendRequest{Path: "/live", ContentType: "application/json", Body: []byte(msg)})
		res = liveStep(t, s, "/live", res)
		if string(res.Body) != "["+msg+"]" || res.Count != 1 || res.Next != int64(i+1) || !res.UpToDate {
			t.Fatalf("live read %d: body %s, count %d, next %d, up to date %v; want [%s], 1, %d, true",
				i, res.Body, res.Count, res.Next, res.UpToDate, msg, i+1)
		}
		// The caller's memory is its own again once the append returned.
		body := []byte(fmt.Sprintf("chunk-%02d;", i))
		mustAppendRecord(t, s, AppendRequest{Path: "/bytes", ContentType: "application/octet-stream", Body: body})
		want := string(body)
		copy(body, "XXXXXXXXX")
		bres = liveStep(t, s, "/bytes", bres)
		if string(bres.Body) != want {
			t.Fatalf("live byte read %d: %q, want %q", i, bres.Body, want)
		}
		tailBytesConsistent(t, s)
	}
	if got := s.k.CachedReads() - before; got != 2*n {
		t.Fatalf("%d of %d live reads answered from the tail cache, want all", got, 2*n)
	}

	// A reader behind the cached records reads the database, and gets everything.
	all, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/live", After: 0, Watch: true})
	if err != nil || all.Count != n || all.Next != n {
		t.Fatalf("read from the start: %d messages, next %d, %v; want %d", all.Count, all.Next, err, n)
	}

	// Closing reaches the live reader (a change without records: read from the database).
	mustAppendRecord(t, s, AppendRequest{Path: "/live", Close: true})
	res = liveStep(t, s, "/live", res)
	if !res.Info.Closed || !res.UpToDate || res.Next != n {
		t.Fatalf("after close: closed %v, up to date %v, next %d; want closed at %d", res.Info.Closed, res.UpToDate, res.Next, n)
	}
	// Deleting ends the entry: the next live read finds no stream.
	if err := s.Protocol().DeleteStream(ctx, "/bytes"); err != nil {
		t.Fatal(err)
	}
	<-bres.Changed
	if _, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/bytes", After: bres.Next, Watch: true}); err == nil {
		t.Fatal("live read of a deleted stream succeeded")
	}
	tailBytesConsistent(t, s)
}

// A live reader served from the tail cache never sees a huge record in part: its hidden slices
// neither wake the reader nor reach the cache, and the record arrives whole once visible.
func TestLiveReaderFromTheTailCacheNeverSeesHalfAHugeRecord(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/huge", "application/json")
	mustAppendRecord(t, s, AppendRequest{Path: "/huge", ContentType: "application/json", Body: []byte(`{"first":1}`)})
	res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/huge", After: 0, Watch: true})
	if err != nil || res.Count != 1 {
		t.Fatalf("first read: %d messages, %v", res.Count, err)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "/huge", ContentType: "application/json", Body: []byte(`{"second":1}`)})
	res = liveStep(t, s, "/huge", res) // from the cache
	if string(res.Body) != `[{"second":1}]` {
		t.Fatalf("second read: %s", res.Body)
	}
	cachedBefore := s.k.CachedReads()

	body, joined := hugeJSON(10_000)
	reached, proceed, done := pausedHugeAppend(t, s, ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: body})
	<-reached
	select {
	case <-res.Changed:
		t.Fatal("hidden slices woke the live reader")
	default:
	}
	mid, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/huge", After: res.Next, Watch: true})
	if err != nil || mid.Count != 0 || mid.Next != 2 || mid.Info.Tail != 2 {
		t.Fatalf("live read mid-append: %d messages, next %d, tail %d, %v; want none at 2", mid.Count, mid.Next, mid.Info.Tail, err)
	}
	if s.k.CachedReads() == cachedBefore {
		t.Fatal("the live read mid-append did not come from the tail cache")
	}
	proceed()
	if err := <-done; err != nil {
		t.Fatalf("huge append: %v", err)
	}
	var got []byte
	for res.Next < 10_002 {
		res = liveStep(t, s, "/huge", res)
		if res.Count > 0 {
			if len(got) > 0 {
				got = append(got, ',')
			}
			got = append(got, res.Body[1:len(res.Body)-1]...)
		}
		if res.UpToDate && res.Next < 10_002 {
			t.Fatalf("live read up to date at %d, before the huge record's end", res.Next)
		}
		if !res.UpToDate {
			// More pages of the record: the next read needs no wake.
			c := make(chan struct{})
			close(c)
			res.Changed = c
		}
	}
	if !bytes.Equal(got, []byte(joined)) {
		t.Fatalf("live reads after the huge record: %d bytes, want the record's %d", len(got), len(joined))
	}
	tailBytesConsistent(t, s)
}

// A caller that got its answer reads its own write from the tail cache at once, before any wake
// of the readers it may have overtaken.
func TestCallerReadsItsOwnWriteFromTheTailCache(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/own", "application/json")
	res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/own", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		msg := fmt.Sprintf(`{"i":%d}`, i)
		before := s.k.CachedReads()
		mustAppendRecord(t, s, AppendRequest{Path: "/own", ContentType: "application/json", Body: []byte(msg)})
		got, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/own", After: res.Next, Watch: true})
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Body) != "["+msg+"]" || got.Next != int64(i+1) {
			t.Fatalf("read right after append %d: %s at %d, want [%s] at %d", i, got.Body, got.Next, msg, i+1)
		}
		if s.k.CachedReads() != before+1 {
			t.Fatalf("read right after append %d did not come from the tail cache", i)
		}
		res = got
	}
}

// A reader that follows a stream long past what one entry keeps gets every message once, in
// order, while the entry stays within its bound.
func TestTailCacheEntryStaysBoundedWhileFollowed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	createStream(t, s, "/long", "application/json")
	res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/long", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	pad := string(bytes.Repeat([]byte("p"), 1000))
	const n = 800 // ~800 KB: the entry drops its oldest records three times over
	for i := range n {
		msg := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, pad)
		mustAppendRecord(t, s, AppendRequest{Path: "/long", ContentType: "application/json", Body: []byte(msg)})
		res = liveStep(t, s, "/long", res)
		if string(res.Body) != "["+msg+"]" {
			t.Fatalf("live read %d: %.40s, want message %d", i, res.Body, i)
		}
		size, recs, _, ok := s.k.TailEntry("/long")
		if !ok || size > kernel.TailEntryBytes || recs == 0 {
			t.Fatalf("after append %d: entry %v holds %d bytes in %d records, want at most %d", i, ok, size, recs, kernel.TailEntryBytes)
		}
	}
	tailBytesConsistent(t, s)
	// A reader at the oldest cached position is answered from the entry, in order.
	_, _, lo, _ := s.k.TailEntry("/long")
	page, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/long", After: lo, Watch: true})
	if err != nil || page.Count != int(n-lo) {
		t.Fatalf("read from the entry's start %d: %d messages, %v; want %d", lo, page.Count, err, n-lo)
	}
}

// A JSON array body whose messages are stored as they stand in it (the record is the array's
// text, not a copy joined again) reads back exactly, from the tail cache and from the database,
// after the caller reused its memory; and so do bodies that take the copying path (whitespace,
// a duplicate key, a nested array).
func TestArrayBodiesReadBackExactlyAfterTheCallerReusesThem(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/arr", "application/json")
	res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/arr", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ body, stored string }{
		{`[{"a":1},{"b":2},"x",3]`, `[{"a":1},{"b":2},"x",3]`},
		{` [ {"a" : 1} , [1, 2] ]`, `[{"a":1},[1,2]]`},
		{`[[1,2],{"type":"t","idempotencyKey":"k1"}]`, `[[1,2],{"type":"t","idempotencyKey":"k1"}]`},
		{`[{"type":"t","idempotencyKey":"k1"},{"c":3}]`, `[{"c":3}]`}, // k1 is a duplicate: not stored again
		{`{"single":true}`, `[{"single":true}]`},
	}
	var all []string
	for i, c := range cases {
		body := []byte(c.body)
		mustAppendRecord(t, s, AppendRequest{Path: "/arr", ContentType: "application/json", Body: body})
		for j := range body {
			body[j] = 'X' // the caller's memory is its own once the append returned
		}
		res = liveStep(t, s, "/arr", res)
		if string(res.Body) != c.stored {
			t.Fatalf("append %d (%s): live read %s, want %s", i, c.body, res.Body, c.stored)
		}
		all = append(all, c.stored[1:len(c.stored)-1])
	}
	want := "[" + strings.Join(all, ",") + "]"
	got, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/arr", After: 0})
	if err != nil || string(got.Body) != want {
		t.Fatalf("read from the start: %s, %v; want %s", got.Body, err, want)
	}
}
