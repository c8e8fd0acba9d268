package stream

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/jackc/pgx/v5"
)

// eventAnswer is the outcome of an append started with appendEventAsync.
type eventAnswer struct {
	evs []foldtype.Event
	err error
}

// appendEventAsync appends one event of type typ to the stream at path on a goroutine of its own
// and returns the channel its outcome arrives on.
func appendEventAsync(ctx context.Context, s *Store, path, typ string) chan eventAnswer {
	ch := make(chan eventAnswer, 1)
	go func() {
		evs, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: typ})
		ch <- eventAnswer{evs, err}
	}()
	return ch
}

// On a shared database the writer builds the next group while the previous group's COMMIT is on
// its way (docs/store.md#one-writer). Here a group's COMMIT fails — a deferred trigger refuses
// the append when the transaction commits, after waiting for a lock the test holds — while the
// next group is built: that group, appends to other streams, holds its streams' locks before the
// first commit's outcome is known, and must commit all the same; the failed group's append fails
// alone; and an append to the failed group's stream, queued meanwhile, waits for that outcome and
// then takes the offset the failed append did not use.
func TestPostgresCommitFailingWhileTheNextGroupIsBuiltFailsOnlyItsOwnWrites(t *testing.T) {
	url := pgtest.URL(t)
	s := openPGStore(t, url)
	heldA := heldBackOn(s, "/a") // set before any write: the writer reads it after
	ctx := context.Background()
	// /c and /d are seeded by another node, so this one has no entry of them to rely on: the next
	// group reads their rows under their locks while the first commits (an entry of its own would
	// let it queue a check with its commit instead, holding no lock before it).
	other := openPGStore(t, url)
	for _, p := range []string{"/a", "/c", "/d"} {
		seeder := other
		if p == "/a" {
			seeder = s
		}
		if _, err := seeder.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var schema string
	var cID int64
	if err := admin.QueryRow(ctx, `SELECT current_schema(), (SELECT id FROM streams WHERE path = '/c')`).Scan(&schema, &cID); err != nil {
		t.Fatal(err)
	}
	release := holdCommitsMarked(t, admin, url, schema)
	defer release()

	// pollLocks waits until query, counting rows of pg_locks in this database, finds one.
	pollLocks := func(what, query string, args ...any) {
		t.Helper()
		if !wait.Every(20*time.Second, 5*time.Millisecond, func() bool {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND `+query, args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}) {
			t.Fatalf("%s: not reached", what)
		}
	}

	appendTo := func(path, typ string) chan eventAnswer { return appendEventAsync(ctx, s, path, typ) }
	failing := appendTo("/a", "fail-at-commit")
	// Its COMMIT runs the deferred trigger, which waits for the test's lock.
	pollLocks("the failing group's COMMIT waiting in the trigger",
		`NOT granted AND classid::int8 = (hashtext($1)::int8 & 4294967295) AND objid = 17`, schema)

	c, d, after := appendTo("/c", "t"), appendTo("/d", "t"), appendTo("/a", "after")
	// The next group is built meanwhile: it holds /c's stream lock before the commit is known.
	pollLocks("the next group holding /c's lock while the first group commits",
		`granted AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 2`, int64(streamLockClass(schema)), int64(uint32(int32(cID))))
	// Proof that the append to /a reached the writer and was held back behind the committing
	// group (it runs again only once that commit is known): one answered early is never held back.
	heldBack(t, heldA)
	select {
	case a := <-after:
		t.Fatalf("the append to /a was answered (%v, %v) before the commit of the group it follows was known", a.evs, a.err)
	default:
	}
	release()

	if a := <-failing; a.err == nil {
		t.Fatalf("the append whose commit failed was answered success at offset %d", a.evs[0].Offset)
	}
	for _, ch := range []chan eventAnswer{c, d} {
		a := <-ch
		if a.err != nil {
			t.Fatalf("an append of the next group failed with the previous group's commit: %v", a.err)
		}
		if a.evs[0].Offset != 2 {
			t.Errorf("an append of the next group got offset %d, want 2", a.evs[0].Offset)
		}
	}
	a := <-after
	if a.err != nil {
		t.Fatalf("the append to /a after the failed commit: %v", a.err)
	}
	if a.evs[0].Offset != 2 {
		t.Errorf("the append to /a after the failed commit got offset %d, want 2 (the failed one stored nothing)", a.evs[0].Offset)
	}
	for path, want := range map[string][]string{"/a": {"seed", "after"}, "/c": {"seed", "t"}, "/d": {"seed", "t"}} {
		page, err := s.readEvents(ctx, path, 0, 10, readOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, e := range page.Events {
			got = append(got, e.Type)
			if e.Offset != int64(i+1) {
				t.Errorf("%s: event %d at offset %d", path, i, e.Offset)
			}
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%s holds %v, want %v", path, got, want)
		}
	}
	// The writer's state follows the database: the next appends continue each stream.
	for path, want := range map[string]int64{"/a": 3, "/c": 3} {
		evs, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "next"})
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Offset != want {
			t.Errorf("next append to %s got offset %d, want %d", path, evs[0].Offset, want)
		}
	}
}
