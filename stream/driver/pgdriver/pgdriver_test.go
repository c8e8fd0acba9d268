package pgdriver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

func open(t *testing.T, url string) *pgdriver.Driver {
	t.Helper()
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return d
}

// openWriter opens a driver on a fresh schema, as open does, and its writer.
func openWriter(t *testing.T) (*pgdriver.Driver, driver.Writer) {
	t.Helper()
	d := open(t, pgtest.URL(t))
	w, err := d.Writer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d, w
}

// TestMigrateConcurrentNodesApplyEachVersionOnce: four nodes migrating one fresh schema at once
// apply each version once between them. The applications are counted as they happen (each node
// logs every version it applied), not from the migrations table, whose primary key would hide a
// second application that did not fail.
func TestMigrateConcurrentNodesApplyEachVersionOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	applied := &appliedVersions{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: slog.New(applied)})
			if err != nil {
				errs <- err
				return
			}
			defer d.Close()
			errs <- d.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	d := open(t, url)
	var n, latest int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*), max(version) FROM foldstream_migrations`).Scan(&n, &latest); err != nil {
		t.Fatal(err)
	}
	if n != latest || latest < 1 {
		t.Fatalf("migrations recorded: got %d rows for versions up to %d, want each version once", n, latest)
	}
	applied.mu.Lock()
	defer applied.mu.Unlock()
	for v := 1; v <= latest; v++ {
		if applied.n[int64(v)] != 1 {
			t.Errorf("version %d applied %d times by the four nodes, want once (applications: %v)", v, applied.n[int64(v)], applied.n)
		}
	}
	if len(applied.n) != latest {
		t.Errorf("applications %v, want versions 1..%d", applied.n, latest)
	}
}

// appliedVersions is a slog handler counting the "applied schema migration" records by version.
type appliedVersions struct {
	mu sync.Mutex
	n  map[int64]int
}

func (a *appliedVersions) Enabled(context.Context, slog.Level) bool { return true }
func (a *appliedVersions) WithAttrs([]slog.Attr) slog.Handler       { return a }
func (a *appliedVersions) WithGroup(string) slog.Handler            { return a }
func (a *appliedVersions) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "applied schema migration") {
		return nil
	}
	r.Attrs(func(at slog.Attr) bool {
		if at.Key == "version" {
			a.mu.Lock()
			if a.n == nil {
				a.n = map[int64]int{}
			}
			a.n[at.Value.Int64()]++
			a.mu.Unlock()
		}
		return true
	})
	return nil
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	d := open(t, url)
	if _, err := d.Pool().Exec(ctx, `INSERT INTO foldstream_migrations(version, name) VALUES (999, 'from the future')`); err != nil {
		t.Fatal(err)
	}
	err := d.Migrate(ctx)
	if !errors.Is(err, foldtype.ErrStoreSchema) {
		t.Fatalf("migrate over a newer schema: got %v, want STORE_SCHEMA", err)
	}
}

func TestLeaseTakeoverFencesTheOldHoldersCheckpoint(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	const ttl = 300 * time.Millisecond
	la, ok, err := a.AcquireLease(ctx, "p", "a", "a:1", ttl)
	if err != nil || !ok {
		t.Fatalf("a acquires: ok=%v err=%v", ok, err)
	}
	if _, ok, err := b.AcquireLease(ctx, "p", "b", "b:1", ttl); err != nil || ok {
		t.Fatalf("b acquires a held lease: ok=%v err=%v, want refused", ok, err)
	}
	if ls, err := b.Leases(ctx, driver.LeaseQuery{Prefix: "p"}); err != nil || len(ls) != 1 || ls[0].Addr != "a:1" || !ls[0].Live {
		t.Fatalf("holder: got %+v %v, want a:1 live", ls, err)
	}
	writeCP := func(d *pgdriver.Driver, l driver.Lease, off int64) error {
		w, _ := d.Writer(ctx)
		tx, err := w.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p",
			Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: off}, Fence: l.Fence()}); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := writeCP(a, la, 1); err != nil {
		t.Fatalf("holder's fenced write: %v", err)
	}
	// b waits for the lease to run out (database clock), then takes it over.
	var lb driver.Lease
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, ok, err := b.AcquireLease(ctx, "p", "b", "b:1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			lb = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never took the expired lease over")
		}
		<-time.After(20 * time.Millisecond) // polling a database-clock expiry, not synchronising goroutines
	}
	if lb.Generation != la.Generation+1 {
		t.Fatalf("generation after takeover: got %d, want %d", lb.Generation, la.Generation+1)
	}
	if err := writeCP(a, la, 2); !errors.Is(err, foldtype.ErrLeaseLost) {
		t.Fatalf("old holder's write after takeover: got %v, want LEASE_LOST", err)
	}
	if renewed, err := a.RenewLeases(ctx, "a", []driver.Lease{la}, ttl); err != nil || len(renewed) != 0 {
		t.Fatalf("old holder renews: got %+v err=%v, want refused", renewed, err)
	}
	if err := writeCP(b, lb, 3); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	var off int64
	if err := a.Read(ctx, func(r driver.Reader) error {
		cp, _, err := r.Checkpoint(ctx, "/s", "p")
		off = cp.ReducedThroughOffset
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if off != 3 {
		t.Fatalf("checkpoint: got %d, want 3 (the stale write left nothing)", off)
	}
}

// commitNote commits a transaction that only sends a notification for stream id.
func commitNote(t *testing.T, d *pgdriver.Driver, id int64) {
	t.Helper()
	ctx := context.Background()
	w, _ := d.Writer(ctx)
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Notify(ctx, driver.Notification{StreamID: id, Path: "/x"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestListenDeliversOtherNodesCommitsAndRecoversFromAKilledConnection(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	got := make(chan driver.Notification, 100)
	stop, err := b.Listen(ctx, func(n driver.Notification) { got <- n })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	want := func(id int64) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case n := <-got:
				if n.StreamID == id {
					return
				}
			case <-timeout:
				t.Fatalf("no notification for stream %d", id)
			}
		}
	}
	commitNote(t, a, 7)
	want(7)
	commitNote(t, b, 8) // b's own: skipped
	commitNote(t, a, 9)
	select {
	case n := <-got:
		if n.StreamID != 9 {
			t.Fatalf("got notification %+v, want stream 9 (own notifications are skipped)", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}

	// Kill the listening connection: the listener polls (zero notifications) and reconnects.
	if _, err := a.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND backend_type = 'client backend'`,
		pgdriver.ListenerName(b.Node())); err != nil {
		t.Fatal(err)
	}
	want(0)
	// After the reconnect, notifications flow again.
	deadline := time.After(10 * time.Second)
	for i := int64(100); ; i++ {
		commitNote(t, a, i)
		select {
		case n := <-got:
			if n.StreamID >= 100 {
				return
			}
		case <-deadline:
			t.Fatal("notifications never resumed after the listener's connection was killed")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestLockStreamNeverDeadlocksTwoGroups(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	wa, _ := a.Writer(ctx)
	wb, _ := b.Writer(ctx)
	ta, err := wa.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := wb.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.LockStream(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.LockStream(ctx, 2); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		if err := ta.LockStream(ctx, 2); err != nil {
			errs <- err
			return
		}
		errs <- ta.Commit(ctx)
	}()
	go func() {
		if err := tb.LockStream(ctx, 1); err != nil {
			errs <- err
			return
		}
		errs <- tb.Commit(ctx)
	}()
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("crossed locks: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("crossed locks deadlocked")
		}
	}
}

func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgdriver.Open(ctx, pgdriver.Config{URL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable", ConnectTimeout: time.Second})
	if !errors.Is(err, foldtype.ErrUnavailable) {
		t.Fatalf("open an unreachable database: got %v, want UNAVAILABLE", err)
	}
}

func TestOpenCreatesTheSchemaItsURLNames(t *testing.T) {
	t.Parallel()
	base := pgtest.ServerURL(t)
	schema := "fs_auto_" + time.Now().Format("150405") + "_" + fmt.Sprint(time.Now().UnixNano()%100000)
	t.Cleanup(func() { pgtest.DropSchema(t, base, schema) })
	url := pgtest.WithSchema(t, base, schema)
	d := open(t, url)
	if d.Schema() != schema {
		t.Fatalf("schema: got %q, want %q", d.Schema(), schema)
	}
}

// A search_path names a schema as PostgreSQL reads identifiers: unquoted in any case, it names the
// lower-case schema; quoted, exactly what is written. Open creates that schema and uses it.
func TestOpenCreatesTheSchemaItsURLNamesInAnyCase(t *testing.T) {
	t.Parallel()
	base := pgtest.ServerURL(t)
	suffix := fmt.Sprint(time.Now().UnixNano() % 1000000)
	for _, c := range []struct{ searchPath, want string }{
		{"Fs_Mixed_" + suffix, "fs_mixed_" + suffix},
		{`"Fs_Quoted_` + suffix + `"`, "Fs_Quoted_" + suffix},
	} {
		t.Cleanup(func() { pgtest.DropSchema(t, base, c.searchPath) })
		d := open(t, pgtest.WithSchema(t, base, c.searchPath))
		if d.Schema() != c.want {
			t.Errorf("search_path %s: schema %q, want %q", c.searchPath, d.Schema(), c.want)
		}
	}
}

func TestEphemeralPayloadsOfAnySizeReachOtherNodes(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	got := make(chan driver.Notification, 10)
	stop, err := b.Listen(ctx, func(n driver.Notification) {
		if n.StreamID != 0 {
			got <- n
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, size := range []int{10, 20000} {
		payload := []byte(`["` + strings.Repeat("x", size) + `"]`)
		w, _ := a.Writer(ctx)
		tx, err := w.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Notify(ctx, driver.Notification{StreamID: 5, Path: "/e", Ephemeral: payload}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-got:
			if n.StreamID != 5 || n.Path != "/e" || string(n.Ephemeral) != string(payload) {
				t.Fatalf("size %d: got stream %d %q with %d payload bytes, want the %d sent", size, n.StreamID, n.Path, len(n.Ephemeral), len(payload))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("size %d: no notification", size)
		}
	}
}

// TestTwoRecordsAtOneOffsetAreARetryableCollision: should two writers ever pick one offset, the
// records primary key refuses the second, and the caller gets a retryable coded error (never an
// uncoded one that the server would answer with 500).
func TestTwoRecordsAtOneOffsetAreARetryableCollision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, w := openWriter(t)
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id, err := tx.InsertStream(ctx, driver.Stream{Path: "/dup", ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	rec := driver.Record{StreamID: id, RecordStart: 0, Start: 0, End: 1, Body: []byte(`{}`)}
	if err := tx.InsertRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	err = tx.InsertRecord(ctx, rec)
	if err == nil {
		err = tx.Commit(ctx)
	}
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeUnavailable || !foldtype.IsRetryable(err) {
		t.Fatalf("a second record at one offset: got %v, want a retryable %s", err, foldtype.CodeUnavailable)
	}
}

func TestReleaseIsAnnouncedToTheOtherNodesLeaseWatchers(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	stopListen, err := b.Listen(ctx, func(driver.Notification) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stopListen()
	got := make(chan [2]string, 4)
	defer b.WatchLeases(func(key, holder string) { got <- [2]string{key, holder} })()
	l, ok, err := a.AcquireLease(ctx, "processor\x1f/s\x1fp", "node-a", "", time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := a.ReleaseLease(ctx, l, false); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if g != [2]string{l.Key, "node-a"} {
			t.Fatalf("announced %q, want %q by node-a", g, l.Key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other node never heard of the release")
	}
}
