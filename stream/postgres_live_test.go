package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// Live reads across nodes (docs/postgres.md#live-reads): another node's commit reaches this
// node's live readers from its notification, without a read of the database.

// reads is the number of read transactions store s has begun on PostgreSQL, by every goroutine.
func reads(t *testing.T, s *stream.Store) int64 {
	t.Helper()
	var d *pgdriver.Driver
	switch sd := s.Driver().(type) {
	case *pgdriver.Driver:
		d = sd
	case countingDriver:
		d = sd.Driver
	default:
		t.Fatalf("store driver is %T, want *pgdriver.Driver", s.Driver())
	}
	return testhooks.PGReads(d)
}

// readCounter is the context key under which a context carries the *atomic.Int64 that the reads
// begun with it are counted in (countingDriver).
type readCounter struct{}

// countingDriver is the PostgreSQL driver, which also counts each read transaction in the
// counter its context carries: the reads one reader's calls begin, apart from those of the
// store's other goroutines (other readers, the listener's reads of records that did not travel).
//
// It also counts the "anything may have changed" notifications it delivers (StreamID 0: the
// listener's connection was lost or came back), after which every reader of the node reads the
// database once, rightly: a busy machine can miss the listener's ping.
type countingDriver struct {
	*pgdriver.Driver
	resyncs *atomic.Int64
}

func (d countingDriver) Listen(ctx context.Context, fn func(driver.Notification)) (func(), error) {
	return d.Driver.Listen(ctx, func(n driver.Notification) {
		if n.StreamID == 0 {
			d.resyncs.Add(1)
		}
		fn(n)
	})
}

// resyncs is how many "anything may have changed" notifications s's listener delivered.
func resyncs(s *stream.Store) int64 { return s.Driver().(countingDriver).resyncs.Load() }

func (d countingDriver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	if n, ok := ctx.Value(readCounter{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	return d.Driver.Read(ctx, fn)
}

// openPGCounted opens a store on url like openPG, whose reads are also counted per context.
func openPGCounted(t *testing.T, url string) *stream.Store {
	t.Helper()
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quiet})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	s, err := stream.OpenDriver(ctx, countingDriver{d, new(atomic.Int64)}, stream.Config{Logger: quiet})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// liveReader follows path on s as SSE does (ReadRecords with Watch, waiting on Changed) and
// collects every JSON message it is handed, with the read transactions each wake's read began
// (its own: counted through its context, so s must come from openPGCounted).
type liveReader struct {
	mu       sync.Mutex
	msgs     []int
	closed   bool
	err      error
	maxReads int64        // the most read transactions one wake's read took
	own      atomic.Int64 // the read transactions the reader's calls began
	got      chan struct{}
}

func followLive(ctx context.Context, t *testing.T, s *stream.Store, path string) *liveReader {
	t.Helper()
	if _, ok := s.Driver().(countingDriver); !ok {
		t.Fatalf("store driver is %T, want countingDriver (openPGCounted)", s.Driver())
	}
	lr := &liveReader{got: make(chan struct{}, 1)}
	ctx = context.WithValue(ctx, readCounter{}, &lr.own)
	res, err := s.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: path, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			lr.add(res)
			if res.Info.Closed && res.UpToDate {
				return
			}
			select {
			case <-res.Changed:
			case <-ctx.Done():
				return
			}
			before := lr.own.Load()
			next, err := s.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: path, After: res.Next, Watch: true})
			used := lr.own.Load() - before
			lr.mu.Lock()
			lr.maxReads = max(lr.maxReads, used)
			if err != nil {
				lr.err = err
				lr.mu.Unlock()
				lr.signal()
				return
			}
			lr.mu.Unlock()
			res = next
		}
	}()
	return lr
}

func (lr *liveReader) signal() {
	select {
	case lr.got <- struct{}{}:
	default:
	}
}

func (lr *liveReader) add(res stream.ReadResult) {
	var vs []struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(res.Body, &vs); err != nil {
		lr.mu.Lock()
		lr.err = fmt.Errorf("body %q: %w", res.Body, err)
		lr.mu.Unlock()
		lr.signal()
		return
	}
	lr.mu.Lock()
	for _, v := range vs {
		lr.msgs = append(lr.msgs, v.N)
	}
	lr.closed = res.Info.Closed && res.UpToDate
	lr.mu.Unlock()
	lr.signal()
}

// waitFor waits until the reader holds n messages (or ended), and returns them.
func (lr *liveReader) waitFor(t *testing.T, n int) []int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		lr.mu.Lock()
		got, err := append([]int(nil), lr.msgs...), lr.err
		lr.mu.Unlock()
		if err != nil || len(got) >= n {
			if err != nil {
				t.Fatalf("live reader: %v", err)
			}
			return got
		}
		select {
		case <-lr.got:
		case <-deadline:
			t.Fatalf("live reader has %d messages after 10 s, want %d", len(got), n)
		}
	}
}

func appendN(t *testing.T, s *stream.Store, path string, n int, pad int) {
	t.Helper()
	body := fmt.Sprintf(`{"n":%d,"pad":%q}`, n, strings.Repeat("x", pad))
	if _, err := s.Protocol().AppendRecord(context.Background(), stream.AppendRequest{Path: path, ContentType: "application/json", Body: []byte(body)}); err != nil {
		t.Error(err) // also called off the test's goroutine
	}
}

func wantSequence(t *testing.T, got []int, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("got %d messages, want %d: %v", len(got), n, got)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: every message exactly once, in order: %v", i, v, got)
		}
	}
}

func TestPostgresLiveReadersGetAnotherNodesAppendsWithoutReadingTheDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPGCounted(t, url), openPGCounted(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stream is created on the readers' node: a creation on node A would reach B's listener
	// at some moment after B's first reader read the stream, wake it with nothing new, and (when
	// the wake came between the reader taking its channel and seeding the cache, so the cache
	// refused the seed) cost that wake a read of the database: right, and not what is measured.
	if _, err := b.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/live", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	readers := []*liveReader{followLive(ctx, t, b, "/live"), followLive(ctx, t, b, "/live"), followLive(ctx, t, b, "/live")}
	const n = 30
	for i := range n {
		appendN(t, a, "/live", i, 10)
		for _, lr := range readers {
			lr.waitFor(t, i+1)
		}
	}
	for i, lr := range readers {
		wantSequence(t, lr.waitFor(t, n), n)
		if lr.maxReads != 0 && resyncs(b) == 0 {
			t.Errorf("reader %d: a wake's read took %d read transactions on the database, want 0 (from the notification)", i, lr.maxReads)
		}
	}
	if r := resyncs(b); r > 0 {
		t.Logf("node B's listener resynchronised %d times (its connection was lost or came back); its readers read the database then", r)
	}
	if testhooks.StoreCachedReads(b) < n*int64(len(readers))/2 {
		t.Errorf("%d live reads answered from the tail cache, want most of %d", testhooks.StoreCachedReads(b), n*len(readers))
	}
}

func TestPostgresLiveReadersGetOversizeRecordsAndEveryRecordOnceThroughGaps(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPGCounted(t, url), openPGCounted(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stream is created on the readers' node: a creation on node A would reach B's listener
	// at some moment after B's first reader read the stream, wake it with nothing new, and (when
	// the wake came between the reader taking its channel and seeding the cache, so the cache
	// refused the seed) cost that wake a read of the database: right, and not what is measured.
	if _, err := b.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/big", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	onB, onA := followLive(ctx, t, b, "/big"), followLive(ctx, t, a, "/big")
	more := []*liveReader{followLive(ctx, t, b, "/big"), followLive(ctx, t, b, "/big")}

	// Records over NOTIFY's 8000 bytes travel without their content: node B reads them once, for
	// all its readers, none of which reads the database.
	next := 0
	before := reads(t, b)
	const oversize = 3
	onBs := append(more, onB)
	for range oversize {
		for _, pad := range []int{9000, 10} {
			appendN(t, a, "/big", next, pad)
			next++
			for _, lr := range onBs {
				lr.waitFor(t, next)
			}
		}
	}
	if used := reads(t, b) - before; used > oversize {
		t.Errorf("%d oversize appends cost node B %d reads for its 3 readers, want at most one each", oversize, used)
	}
	for i, lr := range onBs {
		wantSequence(t, lr.waitFor(t, next), next)
		if lr.maxReads != 0 {
			t.Errorf("reader %d: a wake's read took %d read transactions, want 0", i, lr.maxReads)
		}
	}
	appendN(t, a, "/big", next, 10) // the reader's last read of the database (re)starts its cache
	next++
	onB.waitFor(t, next)
	// After that, small records travel again (the reader may still be finishing a read).
	var used int64 = -1
	for try := 0; try < 5 && used != 0; try++ {
		before := reads(t, b)
		appendN(t, a, "/big", next, 10)
		next++
		onB.waitFor(t, next)
		used = reads(t, b) - before
	}
	if used != 0 {
		t.Errorf("small appends after an oversize one cost node B %d reads each, want 0", used)
	}

	// Both nodes append at once: each node's own commits and the other's notifications
	// interleave (gaps in what a node knows), yet every reader gets every message once, in order.
	const per = 40
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []*stream.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				mu.Lock()
				v := next
				next++
				pad := 10
				if v%7 == 0 {
					pad = 9000
				}
				appendN(t, s, "/big", v, pad)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wantSequence(t, onB.waitFor(t, next), next)
	wantSequence(t, onA.waitFor(t, next), next)

	// Closing reaches the readers; so does deleting.
	if _, err := a.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/big", Close: true}); err != nil {
		t.Fatal(err)
	}
	if !wait.Every(10*time.Second, 5*time.Millisecond, func() bool { // polling the reader goroutine's state
		onB.mu.Lock()
		defer onB.mu.Unlock()
		return onB.closed
	}) {
		t.Fatal("node B's live reader never saw the stream closed on node A")
	}
}

func TestPostgresLiveReaderOfAStreamDeletedOnAnotherNodeEnds(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPGCounted(t, url), openPGCounted(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := a.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/d", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	lr := followLive(ctx, t, b, "/d")
	appendN(t, a, "/d", 0, 10)
	lr.waitFor(t, 1)
	if err := a.Protocol().DeleteStream(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		lr.mu.Lock()
		err := lr.err
		lr.mu.Unlock()
		if err != nil {
			if !errors.Is(err, foldtype.ErrStreamNotFound) {
				t.Fatalf("live reader ended with %v, want STREAM_NOT_FOUND", err)
			}
			break
		}
		select {
		case <-lr.got:
		case <-deadline:
			t.Fatal("node B's live reader never saw the stream deleted on node A")
		}
	}
	// The stream created again at the path starts over for a new reader on B.
	if _, err := a.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/d", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	again := followLive(ctx, t, b, "/d")
	appendN(t, a, "/d", 0, 10)
	appendN(t, a, "/d", 1, 10)
	wantSequence(t, again.waitFor(t, 2), 2)
}

func TestPostgresSubscriberGetsAnotherNodesEventsWithoutReadingTheDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	ctx := context.Background()
	if _, err := a.Events().Stream("/ev").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(0)}); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	sub, err := b.Events().Subscribe("/ev", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := reads(t, b)
	const n = 20
	for i := 1; i <= n; i++ {
		if _, err := a.Events().Stream("/ev").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := col.waitFor(t, n)
	for i, ev := range got {
		if ev.Offset != int64(i+2) {
			t.Fatalf("pushed event %d has offset %d, want %d", i, ev.Offset, i+2)
		}
	}
	if used := reads(t, b) - before; used != 0 {
		t.Errorf("node B read the database %d times to publish %d events of node A, want 0", used, n)
	}
}

// blindDriver is the PostgreSQL driver with two faults a test switches on: deaf drops the
// listener's notifications (another node's commits go unheard), blind fails every read
// transaction as a database out of reach does.
type blindDriver struct {
	*pgdriver.Driver
	deaf, blind atomic.Bool
}

func (d *blindDriver) Listen(ctx context.Context, fn func(driver.Notification)) (func(), error) {
	return d.Driver.Listen(ctx, func(n driver.Notification) {
		if !d.deaf.Load() {
			fn(n)
		}
	})
}

func (d *blindDriver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	if d.blind.Load() {
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "the database is unavailable; retry later: read refused by the test")
	}
	return d.Driver.Read(ctx, fn)
}

// TestPostgresSubscriberBehindAFailedCatchUpGetsItsEventsWithoutAnotherCommit: node B commits
// over another node's event it never heard of, and the read that would fill that gap for its
// subscriber fails (the database restarting, a stale connection). Nothing else will happen on
// the stream — no other commit, no notification — yet the subscriber gets both events once the
// database answers again: a failed catch-up is tried again by itself (docs/postgres.md#live-reads).
func TestPostgresSubscriberBehindAFailedCatchUpGetsItsEventsWithoutAnotherCommit(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a := openPG(t, url)
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	bd := &blindDriver{Driver: d}
	b, err := stream.OpenDriver(ctx, bd, stream.Config{Logger: quiet})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	appendOn := func(s *stream.Store, n int) {
		t.Helper()
		if _, err := s.Events().Stream("/gap").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(n)}); err != nil {
			t.Fatal(err)
		}
	}
	appendOn(b, 0)
	col := newCollector()
	sub, err := b.Events().Subscribe("/gap", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	bd.deaf.Store(true)
	bd.blind.Store(true)
	appendOn(a, 1) // unheard by B
	appendOn(b, 2) // commits; publishing it needs event 1, whose read fails
	bd.deaf.Store(false)
	bd.blind.Store(false)

	got := col.waitFor(t, 2)
	for i, ev := range got {
		if ev.Offset != int64(i+2) {
			t.Fatalf("pushed event %d has offset %d, want %d", i, ev.Offset, i+2)
		}
	}
}
