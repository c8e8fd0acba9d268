package stream

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/jackc/pgx/v5"
)

// openPGStore opens a store on the PostgreSQL schema of url (a node of a shared database).
func openPGStore(t testing.TB, url string) *Store {
	t.Helper()
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenDriver(ctx, d, Config{Logger: quietLog})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// streamLockClass is the advisory-lock class pgdriver uses for the stream locks of schema (as
// pgdriver derives it), so a test connection can hold a stream's lock the way another node does.
func streamLockClass(schema string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write([]byte("stream"))
	return h.Sum32()
}

// A group that splits commits its earlier functions early (docs/postgres.md#writes-round-trips);
// when the rest of the group then fails, those functions are committed all the same, so their
// callers are answered success and the writer keeps their state and runs their hooks. The bug: the
// store answered every function of the group with the final commit's failure, so a caller retrying
// its committed plain append stored it twice, and subscribers never heard of it.
//
// Here the group is an append to /x and then one to /y, whose lock another connection holds: the
// second append finds /y taken, the group commits the /x append and waits for /y in a new
// transaction, and that transaction's backend is terminated while it waits. Another node's
// subscriber must hear of the committed append too: its notification was to travel with the lost
// commit.
func TestPostgresWritesCommittedBySplitAreAnsweredSuccessWhenTheRestOfTheGroupFails(t *testing.T) {
	url := pgtest.URL(t)
	s := openPGStore(t, url)
	other := openPGStore(t, url) // another node, which hears of the commit by notification only
	ctx := context.Background()
	for _, p := range []string{"/x", "/y"} {
		if _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var pushed, pushedOther []int64
	subOther, err := other.Events().Subscribe("/x", func(_ context.Context, evs []foldtype.Event, _ foldtype.ScannedRange) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			pushedOther = append(pushedOther, e.Offset)
		}
		return nil
	}, SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer subOther.Close()
	sub, err := s.Events().Subscribe("/x", func(_ context.Context, evs []foldtype.Event, _ foldtype.ScannedRange) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			pushed = append(pushed, e.Offset)
		}
		return nil
	}, SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var schema string
	var yID int64
	if err := admin.QueryRow(ctx, `SELECT current_schema(), (SELECT id FROM streams WHERE path = '/y')`).Scan(&schema, &yID); err != nil {
		t.Fatal(err)
	}
	cls := streamLockClass(schema)
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(cls), int32(yID)); err != nil {
		t.Fatal(err)
	}

	// Terminate the backend that waits for /y's lock (the group's transaction after its split).
	killed := make(chan error, 1)
	go func() {
		var err error
		if !wait.Every(20*time.Second, 5*time.Millisecond, func() bool {
			var n int
			err = admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 2`, int64(cls), int64(uint32(int32(yID)))).Scan(&n)
			return err != nil || n > 0
		}) {
			err = context.DeadlineExceeded
		}
		killed <- err
	}()
	var xOffset int64
	errs := inOneGroup(t, s,
		func() error {
			evs, err := s.Events().Stream("/x").Append(ctx, foldtype.EventInput{Type: "before-split"})
			if err == nil {
				xOffset = evs[0].Offset
			}
			return err
		},
		func() error {
			_, err := s.Events().Stream("/y").Append(ctx, foldtype.EventInput{Type: "after-split"})
			return err
		})
	if err := <-killed; err != nil {
		t.Fatalf("terminate the waiting backend: %v", err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if errs[1] == nil {
		t.Fatal("the append after the split succeeded although its transaction's backend was terminated")
	}
	if errs[0] != nil {
		t.Fatalf("the append committed by the split was answered %v, want success", errs[0])
	}
	if xOffset != 2 {
		t.Errorf("the append committed by the split got offset %d, want 2", xOffset)
	}

	// The other node is notified of the committed append, without any later write to /x.
	var got []int64
	if !wait.Every(10*time.Second, 5*time.Millisecond, func() bool {
		mu.Lock()
		got = append([]int64(nil), pushedOther...)
		mu.Unlock()
		return len(got) > 0
	}) {
		t.Fatal("the other node never heard of the append committed by the split")
	}
	if got[0] != 2 {
		t.Fatalf("the other node's subscriber got offsets %v, want [2]", got)
	}

	// The writer's state of /x includes the committed append: the next one follows it.
	next, err := s.Events().Stream("/x").Append(ctx, foldtype.EventInput{Type: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if next[0].Offset != 3 {
		t.Errorf("next append to /x got offset %d, want 3", next[0].Offset)
	}
	page, err := s.readEvents(ctx, "/x", 0, 10, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range page.Events {
		types = append(types, e.Type)
	}
	if len(types) != 3 || types[0] != "seed" || types[1] != "before-split" || types[2] != "next" {
		t.Errorf("/x holds %v, want [seed before-split next]", types)
	}
	page, err = s.readEvents(ctx, "/y", 0, 10, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 {
		t.Errorf("/y holds %d events, want only its seed (the failed append is not stored)", len(page.Events))
	}

	// The subscriber heard of the committed append (its hook ran) and of the next one, in order.
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	wait.Every(10*time.Second, 5*time.Millisecond, func() bool {
		mu.Lock()
		got = append([]int64(nil), pushed...)
		mu.Unlock()
		return len(got) >= 2
	})
	if len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("subscriber got offsets %v, want [2 3]", got)
	}
}

// A group of appends to separate streams on PostgreSQL reads its streams' rows, under their locks,
// in one round trip with BEGIN, and sends everything else with COMMIT: two round trips for the
// group, where reading each stream's row by itself cost one round trip per append more. The
// streams are another node's writes each time, so this node has no entry of them to rely on
// (TestPostgresGroupOfAppendsToStreamsThisNodeWroteTakesOneRoundTrip is the case where it has).
func TestPostgresGroupOfAppendsToSeparateStreamsTakesTwoRoundTrips(t *testing.T) {
	url := pgtest.URL(t)
	s, other := openPGStore(t, url), openPGStore(t, url)
	d := s.drv.(*pgdriver.Driver)
	ctx := context.Background()
	for round := range 3 {
		paths := make([]string, 5)
		for i := range paths {
			paths[i] = fmt.Sprintf("/r%d/%c", round, 'a'+i)
			if _, err := other.Events().Stream(paths[i]).Append(ctx, foldtype.EventInput{Type: "seed"}); err != nil {
				t.Fatal(err)
			}
		}
		var fns []func() error
		for i, p := range paths {
			if i%2 == 0 {
				fns = append(fns, func() error { _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "t"}); return err })
			} else {
				fns = append(fns, func() error {
					_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: p, ContentType: "application/json", Body: []byte(`{"n":1}`)})
					return err
				})
			}
		}
		before := testhooks.PGWriteRoundTrips(d)
		for i, err := range inOneGroup(t, s, fns...) {
			if err != nil {
				t.Fatalf("round %d: append to %s: %v", round, paths[i], err)
			}
		}
		if got := testhooks.PGWriteRoundTrips(d) - before; round > 0 && got > 2 {
			t.Errorf("round %d: a group of %d appends to separate streams took %d round trips, want 2", round, len(paths), got)
		}
		for _, p := range paths {
			page, err := s.readEvents(ctx, p, 0, 10, readOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range page.Events {
				if e.Offset != int64(i+1) {
					t.Fatalf("%s: event %d at offset %d", p, i, e.Offset)
				}
			}
			if len(page.Events) != 2 {
				t.Errorf("%s holds %d events, want 2", p, len(page.Events))
			}
		}
	}
}
