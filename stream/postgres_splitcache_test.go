package stream

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/jackc/pgx/v5"
)

// TestPostgresALiveReadDuringASplitGroupSeesItsEarlyCommit: a group that splits commits its
// earlier writes while its later ones wait for a lock another node holds. The node's own live
// readers then must see the committed writes: its tail cache of the stream (seeded by a live
// read, extended by its own commits) used to wait for the whole group's end, so a long-poll
// from inside the cached records answered them "up to date" at the tail before the early commit —
// a stale tail while a catch-up read of the database already showed more. The history checker's
// soak found it when a node whose database answers were lost held a stream lock that another
// node's group waited for.
func TestPostgresALiveReadDuringASplitGroupSeesItsEarlyCommit(t *testing.T) {
	url := pgtest.URL(t)
	s := openPGStore(t, url)
	ctx := context.Background()
	p := s.Protocol()
	for _, path := range []string{"/x", "/y"} {
		if _, err := p.CreateStream(ctx, CreateRequest{Path: path, ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
	}
	appendJSON := func(path, body string) error {
		_, err := p.AppendRecord(ctx, AppendRequest{Path: path, ContentType: "application/json", Body: []byte(body)})
		return err
	}
	if err := appendJSON("/x", `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	// Seed the cached tail of /x with a live read at its tail, then extend it by an append.
	first, err := p.ReadRecords(ctx, ReadRequest{Path: "/x", AtTail: true, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	t1 := first.Next
	if err := appendJSON("/x", `{"n":2}`); err != nil {
		t.Fatal(err)
	}
	if r, err := p.ReadRecords(ctx, ReadRequest{Path: "/x", After: t1, Watch: true}); err != nil || string(r.Body) != `[{"n":2}]` {
		t.Fatalf("live read from %d: %q, %v", t1, r.Body, err)
	}
	cached := s.k.CachedReads()
	if cached == 0 {
		t.Fatal("positive control: the live read was not answered from the tail cache")
	}

	// Another connection holds /y's lock, as another node's transaction does.
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

	// One group: an append to /x, then one to /y, which waits for the lock after the split.
	group := make(chan []error, 1)
	go func() {
		group <- inOneGroup(t, s, func() error { return appendJSON("/x", `{"n":3}`) }, func() error { return appendJSON("/y", `{"n":1}`) })
	}()
	if !wait.Every(20*time.Second, 5*time.Millisecond, func() bool { // polling another process's lock table
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::int8 = $1 AND objid::int8 = $2`, int64(cls), int64(uint32(int32(yID)))).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	}) {
		t.Fatal("the group's append to /y never waited for its lock")
	}
	var inDB int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM records r JOIN streams s ON s.id = r.stream_id WHERE s.path = '/x'`).Scan(&inDB); err != nil {
		t.Fatal(err)
	}
	if inDB != 3 {
		t.Fatalf("positive control: /x holds %d records in the database while the group waits, want 3 (the split committed the append)", inDB)
	}

	r, err := p.ReadRecords(ctx, ReadRequest{Path: "/x", After: t1, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != `[{"n":2},{"n":3}]` || !r.UpToDate {
		t.Errorf("live read from %d while the group waits: %q up to date %v, want both messages the database holds", t1, r.Body, r.UpToDate)
	}

	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if errs := <-group; errs[0] != nil || errs[1] != nil {
		t.Fatalf("the group's appends: %v", errs)
	}
}
