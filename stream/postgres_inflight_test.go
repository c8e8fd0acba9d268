package stream

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/jackc/pgx/v5"
)

// On a shared database several groups' COMMITs may be on their way at once
// (Config.MaxCommitsInFlight, docs/store.md#one-writer). Here two groups' COMMITs fail — a
// deferred trigger refuses their appends when their transactions commit, after waiting for a lock
// the test holds — while two other groups, appends to other streams sealed after the first failing
// one and before and after the second, commit beside them: those commit at once (before either
// failing commit's outcome is known) and are answered success; each failing group's append fails
// alone; and an append to a failing group's stream, queued meanwhile, waits for that outcome and
// then takes the offset the failed append did not use.
func TestPostgresCommitsFailingWhileOthersAreInFlightFailOnlyTheirOwnWrites(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenDriver(ctx, d, Config{Logger: quietLog, MaxCommitsInFlight: 4})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	heldA := heldBackOn(s, "/a") // set before any write: the writer reads it after
	t.Cleanup(func() { s.Close(context.Background()) })
	for _, p := range []string{"/a", "/c", "/d", "/e"} {
		if _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var schema string
	if err := admin.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	release := holdCommitsMarked(t, admin, url, schema)
	defer release()

	// poll waits until query, on the admin connection, counts at least want.
	poll := func(what string, want int, query string, args ...any) {
		t.Helper()
		var n int
		if !wait.Every(20*time.Second, 5*time.Millisecond, func() bool {
			if err := admin.QueryRow(ctx, query, args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n >= want
		}) {
			t.Fatalf("%s: not reached (%d of %d)", what, n, want)
		}
	}
	waiting := func(what string, want int) {
		t.Helper()
		poll(what, want, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid::int8 = (hashtext($1)::int8 & 4294967295) AND objid = 17`, schema)
	}
	committed := func(what, path string, want int) {
		t.Helper()
		poll(what, want, `SELECT count(*) FROM records r JOIN streams s ON s.id = r.stream_id WHERE s.path = $1`, path)
	}

	appendTo := func(path, typ string) chan eventAnswer { return appendEventAsync(ctx, s, path, typ) }
	failA := appendTo("/a", "fail-at-commit")
	waiting("the first failing group's COMMIT waiting in the trigger", 1)
	c := appendTo("/c", "t")
	committed("the group after it committing while its commit is on its way", "/c", 2)
	failD := appendTo("/d", "fail-at-commit")
	waiting("the second failing group's COMMIT waiting in the trigger", 2)
	e := appendTo("/e", "t")
	committed("a group after both committing while theirs are on their way", "/e", 2)
	after := appendTo("/a", "after")
	// Proof that the append reached the writer and was held back behind /a's group (it runs again
	// only once that group's commit is known): an append answered early is never held back, and
	// the wait fails.
	heldBack(t, heldA)
	select {
	case a := <-after:
		t.Fatalf("the append to /a was answered (%v, %v) before the commit of the group it follows was known", a.evs, a.err)
	default:
	}
	release()

	for name, ch := range map[string]chan eventAnswer{"/a": failA, "/d": failD} {
		if a := <-ch; a.err == nil {
			t.Fatalf("%s: the append whose commit failed was answered success at offset %d", name, a.evs[0].Offset)
		}
	}
	for name, ch := range map[string]chan eventAnswer{"/c": c, "/e": e, "/a after": after} {
		a := <-ch
		if a.err != nil {
			t.Fatalf("%s: an append beside the failed commits failed: %v", name, a.err)
		}
		if a.evs[0].Offset != 2 {
			t.Errorf("%s: got offset %d, want 2", name, a.evs[0].Offset)
		}
	}
	for path, want := range map[string][]string{"/a": {"seed", "after"}, "/c": {"seed", "t"}, "/d": {"seed"}, "/e": {"seed", "t"}} {
		page, err := s.readEvents(ctx, path, 0, 10, readOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, ev := range page.Events {
			got = append(got, ev.Type)
			if ev.Offset != int64(i+1) {
				t.Errorf("%s: event %d at offset %d", path, i, ev.Offset)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %v, want %v", path, got, want)
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s holds %v, want %v", path, got, want)
				break
			}
		}
	}
	// The writer's state follows the database: the next appends continue each stream.
	for path, want := range map[string]int64{"/a": 3, "/c": 3, "/d": 2, "/e": 3} {
		evs, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "next"})
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Offset != want {
			t.Errorf("next append to %s got offset %d, want %d", path, evs[0].Offset, want)
		}
	}
}

// holdCommitsMarked installs a deferred trigger on records that makes the COMMIT of a transaction
// that appended a record whose body contains "fail-at-commit" wait for an advisory lock (17 in the
// schema's class) held by a connection of its own, and then fail. release frees the lock
// (idempotent).
func holdCommitsMarked(t *testing.T, admin *pgx.Conn, url, schema string) (release func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF position('fail-at-commit'::bytea IN NEW.body) > 0 THEN
				PERFORM pg_advisory_xact_lock(hashtext(current_schema()), 17);
				RAISE EXCEPTION 'refused at commit';
			END IF;
			RETURN NULL;
		END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON records
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1), 17)`, schema); err != nil {
		t.Fatal(err)
	}
	released := false
	return func() {
		if !released {
			released = true
			if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(hashtext($1), 17)`, schema); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// heldBackOn returns a channel told each time a write to path is held back behind a group whose
// commit is on its way (Store.heldBack).
func heldBackOn(s *Store, path string) chan struct{} {
	ch := make(chan struct{}, 64)
	s.k.SetHeldBack(func(p string) {
		if p == path {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	return ch
}

// heldBack waits until held was told, within a deadline wide enough for a loaded machine.
func heldBack(t *testing.T, held chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the append was not held back behind the group whose commit is on its way")
	}
}
