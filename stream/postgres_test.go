package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/jackc/pgx/v5"
)

// Stores on PostgreSQL: several in-process stores on one schema are several nodes.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openPG(t *testing.T, url string) *stream.Store {
	t.Helper()
	s, err := storeopen.Open(context.Background(), url, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// collector is a subscription's deliveries, checked for contiguous ranges.
type collector struct {
	mu     sync.Mutex
	events []foldtype.Event
	last   int64
	gapErr error
	got    chan struct{}
}

func newCollector() *collector { return &collector{last: -1, got: make(chan struct{}, 1)} }

func (c *collector) deliver(_ context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
	c.mu.Lock()
	if c.last >= 0 && r.After != c.last && c.gapErr == nil {
		c.gapErr = fmt.Errorf("push range (%d, %d] does not chain on the previous through %d", r.After, r.Through, c.last)
	}
	c.last = r.Through
	c.events = append(c.events, evs...)
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
	return nil
}

// waitFor waits until the collector holds n events.
func (c *collector) waitFor(t *testing.T, n int) []foldtype.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		evs, gap := append([]foldtype.Event(nil), c.events...), c.gapErr
		c.mu.Unlock()
		if gap != nil {
			t.Fatal(gap)
		}
		if len(evs) >= n {
			return evs
		}
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("subscription got %d events, want %d", len(evs), n)
		}
	}
}

func TestPostgresNodesShareOffsetsSubscriptionsAndProducers(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	ctx := context.Background()

	col := newCollector()
	sub, err := b.Events().Subscribe("/s", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// Both nodes append to one stream at once: offsets stay gapless and ordered.
	const per = 50
	var wg sync.WaitGroup
	for _, s := range []*stream.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if _, err := s.Events().Stream("/s").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	page, err := a.Events().Stream("/s").Read(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2*per {
		t.Fatalf("read %d events, want %d", len(page.Events), 2*per)
	}
	for i, ev := range page.Events {
		if ev.Offset != int64(i+1) {
			t.Fatalf("event %d has offset %d: offsets must be gapless across nodes", i, ev.Offset)
		}
	}
	// B's subscription saw every event of both nodes, in order, in chained ranges.
	got := col.waitFor(t, 2*per)
	for i, ev := range got[:2*per] {
		if ev.Offset != int64(i+1) {
			t.Fatalf("pushed event %d has offset %d", i, ev.Offset)
		}
	}

	// An idempotency key and an offset precondition hold across nodes.
	e1, err := a.Events().Stream("/s").Append(ctx, foldtype.EventInput{Type: "k", IdempotencyKey: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := b.Events().Stream("/s").Append(ctx, foldtype.EventInput{Type: "k", IdempotencyKey: "key-1"})
	if err != nil || e2[0].Offset != e1[0].Offset {
		t.Fatalf("the same key on another node: %v %v, want the echo of offset %d", e2, err, e1[0].Offset)
	}
	if _, err := b.Events().Stream("/s").Append(ctx, foldtype.EventInput{Type: "x", Offset: e1[0].Offset}); !errors.Is(err, foldtype.ErrOffsetConflict) {
		t.Fatalf("stale precondition on another node: got %v, want OFFSET_CONFLICT", err)
	}

	// A producer that moves from node A to node B keeps exactly-once.
	if _, err := a.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	req := func(seq int64) stream.AppendRequest {
		return stream.AppendRequest{Path: "/p", ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"n":%d}`, seq)),
			Producer: &stream.ProducerHeaders{ID: "p", Epoch: 0, Seq: seq}}
	}
	if _, err := a.Protocol().AppendRecord(ctx, req(0)); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Protocol().AppendRecord(ctx, req(0)); err != nil || !res.Duplicate {
		t.Fatalf("a retried batch on another node: %+v %v, want a duplicate", res, err)
	}
	if _, err := b.Protocol().AppendRecord(ctx, req(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Protocol().AppendRecord(ctx, req(3)); !errors.Is(err, foldtype.ErrSequenceGap) {
		t.Fatalf("a gap seen by the other node: got %v, want a sequence gap", err)
	}
	info, err := a.Protocol().HeadStream(ctx, "/p")
	if err != nil || info.Tail != 2 {
		t.Fatalf("producer stream tail: %+v %v, want 2", info, err)
	}
}

func TestPostgresEphemeralsReachOtherNodesWhateverTheirSize(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	ctx := context.Background()
	if _, err := a.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "durable"}); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	sub, err := b.Events().Subscribe("/e", col.deliver, stream.SubscribeOptions{Consumes: []string{"delta", "durable"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	big := make([]byte, 20000)
	for i := range big {
		big[i] = 'x'
	}
	small, err := a.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true, Payload: foldtype.JSON("s")})
	if err != nil {
		t.Fatal(err)
	}
	large, err := a.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true, Payload: foldtype.JSON(string(big))})
	if err != nil {
		t.Fatal(err)
	}
	// The next durable event on the other node takes an offset after the ephemerals'.
	d, err := b.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	if d[0].Offset <= large[0].Offset {
		t.Fatalf("durable event on node B got offset %d, not after node A's ephemeral %d", d[0].Offset, large[0].Offset)
	}
	got := col.waitFor(t, 3)
	var sawSmall, sawLarge bool
	for _, ev := range got {
		if ev.Ephemeral && ev.Offset == small[0].Offset {
			sawSmall = true
		}
		if ev.Ephemeral && ev.Offset == large[0].Offset && len(ev.Payload) > 20000 {
			sawLarge = true
		}
	}
	if !sawSmall || !sawLarge {
		t.Fatalf("node B's subscriber got %d events (small %v, large %v), want both ephemerals of node A", len(got), sawSmall, sawLarge)
	}
}

func TestPostgresDatabaseOutageUnderLoadLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	raw := pgtest.URL(t)
	px, via := pgtest.NewProxy(t, raw)
	a := openPG(t, via) // node A reaches the database through the proxy
	b := openPG(t, raw) // node B directly
	ctx := context.Background()

	col := newCollector()
	sub, err := b.Events().Subscribe("/load", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var acked sync.Map // key -> offset
	var nAcked, nFailed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				evs, err := a.Events().Stream("/load").Append(ctx, foldtype.EventInput{Type: "t", IdempotencyKey: key})
				if err != nil {
					// A cut connection refuses the write (UNAVAILABLE), or takes the COMMIT sent
					// with it (COMMIT_OUTCOME_UNKNOWN: the append may or may not be stored).
					if c := foldtype.CodeOf(err); c != foldtype.CodeUnavailable && c != foldtype.CodeCommitOutcomeUnknown {
						t.Errorf("append during an outage: got %v, want UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN", err)
						return
					}
					nFailed.Add(1)
					time.Sleep(10 * time.Millisecond) // a client backing off
					continue
				}
				acked.Store(key, evs[0].Offset)
				nAcked.Add(1)
			}
		}()
	}
	// Three outages under load; node A recovers by itself each time. Each outage starts once node A
	// has acknowledged appends again since the last one, and ends once an append met it.
	within := func(d time.Duration, cond func() bool) bool {
		return wait.Every(d, 5*time.Millisecond, cond)
	}
	// Each outage must be one: it cuts node A's open connections and an append meets it (the
	// writers append without pause, so one does within the bound unless the outage never reached
	// node A).
	for i := range 3 {
		from := nAcked.Load()
		if !within(20*time.Second, func() bool { return nAcked.Load() >= from+5 }) {
			t.Fatalf("before outage %d: node A acknowledged %d appends in 20 s, want 5", i+1, nAcked.Load()-from)
		}
		failed := nFailed.Load()
		if cut := px.Cut(); cut == 0 {
			t.Fatalf("outage %d cut no connection of node A", i+1)
		}
		if !within(20*time.Second, func() bool { return nFailed.Load() > failed }) {
			t.Fatalf("outage %d: no append failed with UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN within 20 s of the cut", i+1)
		}
		px.Restore()
	}
	// A write after the last outage succeeds without any restart of the node.
	if !wait.Every(20*time.Second, 50*time.Millisecond, func() bool {
		_, err = a.Events().Stream("/load").Append(ctx, foldtype.EventInput{Type: "after"})
		return err == nil
	}) {
		t.Fatalf("node A did not recover after the database came back: %v", err)
	}
	close(stop)
	wg.Wait()

	// Every acknowledged append is in the log exactly once, at the offset it was given.
	var all []foldtype.Event
	for after := int64(0); ; {
		page, err := b.Events().Stream("/load").Read(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Events...)
		if page.AtHead {
			break
		}
		after = page.ScannedThroughOffset
	}
	byKey := map[string]int64{}
	for _, ev := range all {
		if ev.IdempotencyKey != "" {
			if _, dup := byKey[ev.IdempotencyKey]; dup {
				t.Fatalf("key %s stored twice", ev.IdempotencyKey)
			}
			byKey[ev.IdempotencyKey] = ev.Offset
		}
	}
	acked.Range(func(k, v any) bool {
		if off, ok := byKey[k.(string)]; !ok || off != v.(int64) {
			t.Fatalf("acknowledged append %s at %d: in the log at %d (present %v)", k, v, off, ok)
		}
		return true
	})
	// Node B's subscriber saw every event, in order.
	got := col.waitFor(t, len(all))
	for i := range all {
		if got[i].Offset != all[i].Offset {
			t.Fatalf("subscriber event %d at offset %d, log has %d", i, got[i].Offset, all[i].Offset)
		}
	}
	t.Logf("%d appends acknowledged, %d refused with UNAVAILABLE over 3 outages", nAcked.Load(), nFailed.Load())
}

func TestPostgresListenerKilledReadersStillSeeEveryCommit(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	ctx := context.Background()
	col := newCollector()
	sub, err := b.Events().Subscribe("/l", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 60
	for i := range n {
		if i%10 == 5 {
			// Kill every listening connection of this schema's nodes (both stores').
			// The positive control: each kill finds and ends both nodes' listeners, once they are
			// listening again after the last kill (a kill that matched nothing would leave this
			// test about nothing).
			const listeners = `FROM pg_stat_activity WHERE datname = current_database()
				AND query LIKE 'LISTEN "foldstream_' || current_schema() || '"%'`
			// A listener shows its LISTEN as its last query only until it sends another (its
			// ping), so a kill can find one of the two that the count just saw: then both are
			// waited for and killed again, until one kill ends both.
			// (Each poll is a round trip to the database: no pause between them.)
			deadline := time.Now().Add(20 * time.Second)
			for killed := 0; killed < 2; {
				for {
					var n int
					if err := conn.QueryRow(ctx, `SELECT count(*) `+listeners).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n >= 2 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("before commit %d: %d nodes listening after 20 s, want both", i+1, n)
					}
				}
				if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) `+listeners).Scan(&killed); err != nil {
					t.Fatal(err)
				}
				if killed < 2 && time.Now().After(deadline) {
					t.Fatalf("before commit %d: killed %d listening connections, want both nodes'", i+1, killed)
				}
			}
		}
		if _, err := a.Events().Stream("/l").Append(ctx, foldtype.EventInput{Type: "t"}); err != nil {
			t.Fatal(err)
		}
		// A long-poll style wait on node B: a read after the commit sees it at once.
		page, err := b.Events().Stream("/l").Read(ctx, int64(i), 10)
		if err != nil || len(page.Events) != 1 {
			t.Fatalf("node B reads commit %d: %v %v", i+1, page.Events, err)
		}
	}
	got := col.waitFor(t, n)
	for i := range n {
		if got[i].Offset != int64(i+1) {
			t.Fatalf("pushed event %d at offset %d", i, got[i].Offset)
		}
	}
}

// TestPostgresCommitWatchersHearEveryNodesCommits: on a shared database a node's commit watchers
// hear of its own commits and of another node's, whether or not the node reads the stream (no
// subscriber, no waiter). They used to hear only of commits published to a local listener, so a
// host's pattern engines never opened for a stream nobody read through that node.
func TestPostgresCommitWatchersHearEveryNodesCommits(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	ctx := context.Background()
	heard := func(s *stream.Store) <-chan string {
		ch := make(chan string, 16)
		stop := s.Events().WatchCommits(func(path string) {
			select {
			case ch <- path:
			default:
			}
		})
		t.Cleanup(stop)
		return ch
	}
	onA, onB := heard(a), heard(b)
	wait := func(ch <-chan string, want, who string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case p := <-ch:
				if p == want {
					return
				}
			case <-deadline:
				t.Fatalf("%s's watcher never heard of the commit on %s", who, want)
			}
		}
	}
	if _, err := a.Events().Stream("/w/1").Append(ctx, foldtype.EventInput{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	wait(onA, "/w/1", "the committing node")
	wait(onB, "/w/1", "the other node")
}
