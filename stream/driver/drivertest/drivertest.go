// Package drivertest is the behaviour suite every stream store driver must pass. A driver's own
// test runs it with one line:
//
//	func TestDriver(t *testing.T) { drivertest.Run(t, func(t *testing.T) driver.Driver { ... }) }
//
// The factory returns a fresh, empty, un-migrated database for each subtest (a new file, a new
// schema) and arranges its cleanup; Run calls Migrate. The suite checks the driver's contract
// directly (transactions, savepoints, records, keys, producers, claims, checkpoints, leases and
// fences) and then runs the store's behaviour over it through stream.OpenDriver (both views,
// idempotency, producers, forks, deletes, subscriptions), so a new backend proves itself against the
// same cases the embedded one passes.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Factory returns a fresh, empty database's driver for one subtest.
type Factory func(t *testing.T) driver.Driver

// Run runs the whole suite.
func Run(t *testing.T, newDriver Factory) {
	t.Run("Driver", func(t *testing.T) { RunDriver(t, newDriver) })
	t.Run("Store", func(t *testing.T) { RunStore(t, newDriver) })
	t.Run("SubscriptionDriver", func(t *testing.T) { RunSubscriptionDriver(t, newDriver) })
	t.Run("SubscriptionStore", func(t *testing.T) { RunSubscriptionStore(t, newDriver) })
	t.Run("Pause", func(t *testing.T) { RunPause(t, newDriver) })
}

// harness is one migrated driver and its writer.
type harness struct {
	t *testing.T
	d driver.Driver
	w driver.Writer
}

func open(t *testing.T, newDriver Factory) *harness {
	t.Helper()
	ctx := context.Background()
	d := newDriver(t)
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := d.Writer(ctx)
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	return &harness{t: t, d: d, w: w}
}

// fencedWrite begins a write transaction that writes a checkpoint fenced by lease l and leaves it
// open, holding what the fence holds until the caller commits it (rolled back at the test's end
// otherwise).
func (h *harness) fencedWrite(l driver.Lease, offset int64) driver.WriteTx {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.w.Begin(ctx)
	if err != nil {
		h.t.Fatalf("begin: %v", err)
	}
	h.t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if err := tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p",
		Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: offset}, Fence: l.Fence()}); err != nil {
		h.t.Fatalf("fenced checkpoint write: %v", err)
	}
	return tx
}

// write runs fn in one write transaction with one savepoint and commits.
func (h *harness) write(fn func(tx driver.Tx) error) {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.w.Begin(ctx)
	if err != nil {
		h.t.Fatalf("begin: %v", err)
	}
	if err := tx.Savepoint(ctx); err != nil {
		h.t.Fatalf("savepoint: %v", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		h.t.Fatalf("write: %v", err)
	}
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		h.t.Fatalf("release: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		h.t.Fatalf("commit: %v", err)
	}
}

func (h *harness) read(fn func(q driver.Reader) error) {
	h.t.Helper()
	if err := h.d.Read(context.Background(), fn); err != nil {
		h.t.Fatalf("read: %v", err)
	}
}

func jsonRecord(id, start int64, msgs ...string) driver.Record {
	r := driver.Record{StreamID: id, RecordStart: start, Start: start, End: start + int64(len(msgs)), CreatedMs: 1000}
	for i, m := range msgs {
		if i > 0 {
			r.Body = append(r.Body, ',')
		}
		r.Frames = driver.AppendFrame(r.Frames, 1, len(m))
		r.Body = append(r.Body, m...)
	}
	return r
}

// RunDriver checks the driver's contract directly.
func RunDriver(t *testing.T, newDriver Factory) {
	ctx := context.Background()

	t.Run("MigrateTwice", func(t *testing.T) {
		d := newDriver(t)
		for i := range 2 {
			if err := d.Migrate(ctx); err != nil {
				t.Fatalf("migrate %d: %v", i+1, err)
			}
		}
	})

	t.Run("StreamsAndTail", func(t *testing.T) {
		h := open(t, newDriver)
		var id int64
		h.write(func(tx driver.Tx) error {
			var err error
			id, err = tx.InsertStream(ctx, driver.Stream{Path: "/a", ContentType: "application/json", CreatedMs: 1, LastAccessMs: 1, BaseTail: 3})
			if err != nil {
				return err
			}
			return tx.InsertRecord(ctx, jsonRecord(id, 3, `{"n":4}`, `{"n":5}`))
		})
		h.read(func(q driver.Reader) error {
			s, err := q.StreamByPath(ctx, "/a")
			if err != nil {
				return err
			}
			if s.ID != id || s.Tail != 5 || s.BaseTail != 3 {
				t.Errorf("stream: got id %d tail %d base %d, want %d 5 3", s.ID, s.Tail, s.BaseTail, id)
			}
			if _, err := q.StreamByPath(ctx, "/missing"); !errors.Is(err, driver.ErrNoStream) {
				t.Errorf("missing stream: got %v, want ErrNoStream", err)
			}
			return nil
		})
	})

	t.Run("RecordsInOrderAfterAPosition", func(t *testing.T) {
		h := open(t, newDriver)
		h.write(func(tx driver.Tx) error {
			id, err := tx.InsertStream(ctx, driver.Stream{Path: "/r", ContentType: "application/json", CreatedMs: 1, LastAccessMs: 1})
			if err != nil {
				return err
			}
			for i := int64(0); i < 5; i++ {
				rec := jsonRecord(id, i*2, `"a"`, `"b"`)
				rec.Keys = []driver.Key{{Key: "k" + string(rune('0'+i)), Offset: i*2 + 1}}
				if err := tx.InsertRecord(ctx, rec); err != nil {
					return err
				}
			}
			return nil
		})
		h.read(func(q driver.Reader) error {
			s, _ := q.StreamByPath(ctx, "/r")
			var ends []int64
			err := q.Records(ctx, s.ID, 4, func(r driver.Record) (bool, error) {
				ends = append(ends, r.End)
				return len(ends) < 2, nil
			})
			if err != nil {
				return err
			}
			if len(ends) != 2 || ends[0] != 6 || ends[1] != 8 {
				t.Errorf("records after 4, stopping after two: got ends %v, want [6 8]", ends)
			}
			off, ok, err := q.KeyOffset(ctx, s.ID, "k3")
			if err != nil || !ok || off != 7 {
				t.Errorf("key k3: got %d %v %v, want 7", off, ok, err)
			}
			return nil
		})
	})

	t.Run("SavepointRollbackKeepsNeighbours", func(t *testing.T) {
		h := open(t, newDriver)
		tx, err := h.w.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(tx.Savepoint(ctx))
		_, err = tx.InsertStream(ctx, driver.Stream{Path: "/kept", ContentType: "x", CreatedMs: 1, LastAccessMs: 1})
		must(err)
		must(tx.ReleaseSavepoint(ctx))
		must(tx.Savepoint(ctx))
		_, err = tx.InsertStream(ctx, driver.Stream{Path: "/refused", ContentType: "x", CreatedMs: 1, LastAccessMs: 1})
		must(err)
		must(tx.RollbackToSavepoint(ctx))
		must(tx.ReleaseSavepoint(ctx))
		must(tx.Commit(ctx))
		h.read(func(q driver.Reader) error {
			if _, err := q.StreamByPath(ctx, "/kept"); err != nil {
				t.Errorf("kept: %v", err)
			}
			if _, err := q.StreamByPath(ctx, "/refused"); !errors.Is(err, driver.ErrNoStream) {
				t.Errorf("refused: got %v, want ErrNoStream", err)
			}
			return nil
		})
		// The id of a deleted stream is never handed out again.
		h.write(func(tx driver.Tx) error {
			kept, err := tx.StreamByPath(ctx, "/kept")
			if err != nil {
				return err
			}
			if err := tx.DeleteStream(ctx, kept.ID); err != nil {
				return err
			}
			id, err := tx.InsertStream(ctx, driver.Stream{Path: "/kept", ContentType: "x", CreatedMs: 1, LastAccessMs: 1})
			if err == nil && id == kept.ID {
				t.Errorf("id after a delete: got the deleted stream's %d again", id)
			}
			return err
		})
	})

	t.Run("DeleteTakesRecordsKeysProducers", func(t *testing.T) {
		h := open(t, newDriver)
		var id int64
		h.write(func(tx driver.Tx) error {
			var err error
			if id, err = tx.InsertStream(ctx, driver.Stream{Path: "/d", ContentType: "application/json", CreatedMs: 1, LastAccessMs: 1}); err != nil {
				return err
			}
			rec := jsonRecord(id, 0, `"x"`)
			rec.Keys = []driver.Key{{Key: "k", Offset: 1}}
			if err := tx.InsertRecord(ctx, rec); err != nil {
				return err
			}
			if err := tx.PutProducer(ctx, id, driver.Producer{ID: "p", Epoch: 1, LastSeq: 4, UpdatedMs: 1}); err != nil {
				return err
			}
			p, ok, err := tx.Producer(ctx, id, "p")
			if err != nil || !ok || p.Epoch != 1 || p.LastSeq != 4 {
				t.Errorf("producer: got %+v %v %v", p, ok, err)
			}
			return tx.DeleteStream(ctx, id)
		})
		h.read(func(q driver.Reader) error {
			if _, ok, _ := q.KeyOffset(ctx, id, "k"); ok {
				t.Error("key survived the delete")
			}
			if _, ok, _ := q.Producer(ctx, id, "p"); ok {
				t.Error("producer survived the delete")
			}
			n := 0
			_ = q.Records(ctx, id, 0, func(driver.Record) (bool, error) { n++; return true, nil })
			if n != 0 {
				t.Errorf("records after delete: %d", n)
			}
			return nil
		})
	})

	t.Run("ClaimsDueAndExactDelete", func(t *testing.T) {
		h := open(t, newDriver)
		h.write(func(tx driver.Tx) error {
			if err := tx.PutClaim(ctx, driver.Claim{Path: "/a", Slug: "p", AtMs: 50}); err != nil {
				return err
			}
			if err := tx.PutClaim(ctx, driver.Claim{Path: "/b", Slug: "p", AtMs: 10, Failures: 2}); err != nil {
				return err
			}
			// Not exact: the failures differ, the claim stays.
			return tx.DeleteClaim(ctx, driver.Claim{Path: "/b", Slug: "p", AtMs: 10, Failures: 1}, true)
		})
		h.read(func(q driver.Reader) error {
			due, err := q.DueClaims(ctx, 20)
			if err != nil || len(due) != 1 || due[0].Path != "/b" || due[0].Failures != 2 {
				t.Errorf("due at 20: got %+v %v", due, err)
			}
			next, ok, err := q.NextClaimAt(ctx)
			if err != nil || !ok || next != 10 {
				t.Errorf("next claim: got %d %v %v, want 10", next, ok, err)
			}
			return nil
		})
	})

	t.Run("Leases", func(t *testing.T) {
		h := open(t, newDriver)
		d := h.d
		const ttl = time.Minute
		a, ok, err := d.AcquireLease(ctx, "p\x1f/s", "node-a", "http://a", ttl)
		if err != nil || !ok || a.Generation != 1 || a.Holder != "node-a" || !a.Live || time.Until(a.Expires) <= 0 {
			t.Fatalf("first acquire: got %+v %v %v, want node-a at generation 1", a, ok, err)
		}
		if _, ok, err := d.AcquireLease(ctx, "p\x1f/s", "node-b", "http://b", ttl); err != nil || ok {
			t.Fatalf("acquire of a held lease: got %v %v, want refused", ok, err)
		}
		if _, ok, err := d.AcquireLease(ctx, "q\x1f/s", "node-b", "http://b", ttl); err != nil || !ok {
			t.Fatalf("acquire of another key: got %v %v", ok, err)
		}
		ls, err := d.Leases(ctx, driver.LeaseQuery{Prefix: "p\x1f"})
		if err != nil || len(ls) != 1 || ls[0].Holder != "node-a" || ls[0].Addr != "http://a" || !ls[0].Live || ls[0].Idle || ls[0].Generation != 1 {
			t.Fatalf("list: got %+v %v, want node-a's one live lease", ls, err)
		}
		renewed, err := d.RenewLeases(ctx, "node-a", []driver.Lease{a}, ttl)
		if err != nil || len(renewed) != 1 || renewed[0].Generation != 1 {
			t.Fatalf("renew: got %+v %v, want the lease at generation 1", renewed, err)
		}
		if renewed, err := d.RenewLeases(ctx, "node-b", []driver.Lease{a}, ttl); err != nil || len(renewed) != 0 {
			t.Fatalf("renew by another holder: got %+v %v, want none", renewed, err)
		}
		// A handoff: released, it reads as expired, is never renewed again, and the next holder
		// fences the old generation.
		if err := d.ReleaseLease(ctx, a, false); err != nil {
			t.Fatal(err)
		}
		ls, _ = d.Leases(ctx, driver.LeaseQuery{Prefix: "p\x1f"})
		if len(ls) != 1 || ls[0].Live || ls[0].Idle {
			t.Fatalf("after a handoff release: got %+v, want expired, not idle", ls)
		}
		if renewed, err := d.RenewLeases(ctx, "node-a", []driver.Lease{a}, ttl); err != nil || len(renewed) != 0 {
			t.Fatalf("renew after release: got %+v %v, want none", renewed, err)
		}
		b, ok, err := d.AcquireLease(ctx, "p\x1f/s", "node-b", "http://b", ttl)
		if err != nil || !ok || b.Generation != 2 {
			t.Fatalf("takeover: got %+v %v %v, want node-b at generation 2", b, ok, err)
		}
		h.write(func(tx driver.Tx) error {
			err := tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p", StateChanged: true,
				Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 9, State: []byte(`{"n":9}`)},
				Fence:      a.Fence()})
			if !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("write under the old generation: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		// Released idle: listed as idle; acquired again by anyone, at the next generation.
		if err := d.ReleaseLease(ctx, b, true); err != nil {
			t.Fatal(err)
		}
		ls, _ = d.Leases(ctx, driver.LeaseQuery{Prefix: "p\x1f"})
		if len(ls) != 1 || ls[0].Live || !ls[0].Idle || ls[0].Holder != "node-b" {
			t.Fatalf("after an idle release: got %+v, want idle", ls)
		}
		if c, ok, err := d.AcquireLease(ctx, "p\x1f/s", "node-a", "", ttl); err != nil || !ok || c.Generation != 3 {
			t.Fatalf("acquire after an idle release: got %+v %v %v, want generation 3", c, ok, err)
		}
		// An expired lease is taken over.
		short, ok, err := d.AcquireLease(ctx, "r", "node-a", "", 30*time.Millisecond)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			l, ok, err := d.AcquireLease(ctx, "r", "node-b", "", ttl)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if l.Generation != short.Generation+1 {
					t.Fatalf("takeover after expiry: generation %d, want %d", l.Generation, short.Generation+1)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("an expired lease was never taken over")
			}
			time.Sleep(5 * time.Millisecond) // polling the lease's expiry by the database's clock
		}
	})

	t.Run("LeaseQueriesSelectByStateKeysAndPage", func(t *testing.T) {
		h := open(t, newDriver)
		d := h.d
		const ttl = time.Minute
		acq := func(key, holder string) driver.Lease {
			t.Helper()
			l, ok, err := d.AcquireLease(ctx, key, holder, "", ttl)
			if err != nil || !ok {
				t.Fatalf("acquire %q: %v %v", key, ok, err)
			}
			return l
		}
		acq("n\x1fa", "a")
		acq("p\x1f1", "a")
		handed := acq("p\x1f2", "a")
		idle := acq("p\x1f3", "b")
		acq("p\x1f4", "b")
		if err := d.ReleaseLease(ctx, handed, false); err != nil {
			t.Fatal(err)
		}
		if err := d.ReleaseLease(ctx, idle, true); err != nil {
			t.Fatal(err)
		}
		keys := func(ls []driver.Lease) []string {
			out := []string{}
			for _, l := range ls {
				out = append(out, l.Key)
			}
			return out
		}
		for _, c := range []struct {
			name string
			qs   []driver.LeaseQuery
			want []string
		}{
			{"prefix", []driver.LeaseQuery{{Prefix: "p\x1f"}}, []string{"p\x1f1", "p\x1f2", "p\x1f3", "p\x1f4"}},
			{"live", []driver.LeaseQuery{{Prefix: "p\x1f", Live: true}}, []string{"p\x1f1", "p\x1f4"}},
			{"free: released for a takeover, not idle", []driver.LeaseQuery{{Prefix: "p\x1f", Free: true}}, []string{"p\x1f2"}},
			{"keys", []driver.LeaseQuery{{Keys: []string{"p\x1f4", "n\x1fa", "missing"}}}, []string{"n\x1fa", "p\x1f4"}},
			{"no keys", []driver.LeaseQuery{{Keys: []string{}}}, []string{}},
			{"page", []driver.LeaseQuery{{Prefix: "p\x1f", After: "p\x1f1", Limit: 2}}, []string{"p\x1f2", "p\x1f3"}},
			{"several in order", []driver.LeaseQuery{{Prefix: "n\x1f", Live: true}, {Prefix: "p\x1f", Free: true}, {Keys: []string{"p\x1f1"}}},
				[]string{"n\x1fa", "p\x1f2", "p\x1f1"}},
		} {
			ls, err := d.Leases(ctx, c.qs...)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := keys(ls); !slices.Equal(got, c.want) {
				t.Errorf("%s: got %q, want %q", c.name, got, c.want)
			}
		}
	})

	t.Run("LeaseStatusIsStoredByRenewalAndClearedByAcquisition", func(t *testing.T) {
		h := open(t, newDriver)
		d := h.d
		const ttl = time.Minute
		l, _, err := d.AcquireLease(ctx, "s", "a", "", ttl)
		if err != nil {
			t.Fatal(err)
		}
		status := func() string {
			t.Helper()
			ls, err := d.Leases(ctx, driver.LeaseQuery{Keys: []string{"s"}})
			if err != nil || len(ls) != 1 {
				t.Fatalf("list: %+v %v", ls, err)
			}
			return ls[0].Status
		}
		if got := status(); got != "" {
			t.Fatalf("status after acquisition: %q, want none", got)
		}
		l.Status = `{"state":"running"}`
		if _, err := d.RenewLeases(ctx, "a", []driver.Lease{l}, ttl); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != l.Status {
			t.Fatalf("status after a renewal: %q, want %q", got, l.Status)
		}
		l.Status = ""
		if _, err := d.RenewLeases(ctx, "a", []driver.Lease{l}, ttl); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != `{"state":"running"}` {
			t.Fatalf("status after a renewal without one: %q, want it kept", got)
		}
		if err := d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.AcquireLease(ctx, "s", "b", "", ttl); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != "" {
			t.Fatalf("status after a takeover: %q, want none (the new holder reports its own)", got)
		}
	})

	t.Run("ReleaseIsAnnouncedToLeaseWatchers", func(t *testing.T) {
		h := open(t, newDriver)
		lw, ok := h.d.(driver.LeaseWatcher)
		if !ok {
			t.Skip("the driver does not announce releases")
		}
		got := make(chan [2]string, 4)
		stop := lw.WatchLeases(func(key, holder string) { got <- [2]string{key, holder} })
		defer stop()
		l, _, err := h.d.AcquireLease(ctx, "w", "a", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if g != [2]string{"w", "a"} {
				t.Fatalf("announced %q, want w by a", g)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the release was not announced")
		}
		// A release that releases nothing (released already) is not announced, nor is an idle
		// one (nobody needs to take it).
		if err := h.d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		m, _, err := h.d.AcquireLease(ctx, "w", "b", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.d.ReleaseLease(ctx, m, true); err != nil {
			t.Fatal(err)
		}
		stop()
		select {
		case g := <-got:
			t.Fatalf("announced %q for a release that released nothing", g)
		default:
		}
	})

	t.Run("RenewExtendsALeaseWhileAFencedWriteHoldsIt", func(t *testing.T) {
		// A group that fences checkpoints holds their lease rows until it commits; a renewal
		// that waited on one while holding others would deadlock with a group fencing two, and
		// one that only skipped it would leave a busy processor's lease unextended until it ran
		// out under a node still running it (docs/postgres.md#processors-and-leases).
		h := open(t, newDriver)
		a, _, err := h.d.AcquireLease(ctx, "a", "node", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := h.d.AcquireLease(ctx, "b", "node", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tx := h.fencedWrite(a, 1)
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		sent := time.Now()
		renewed, err := h.d.RenewLeases(rctx, "node", []driver.Lease{a, b}, time.Hour)
		if err != nil || len(renewed) != 2 {
			t.Fatalf("renew while a fenced write is open: got %+v %v, want both leases still held", renewed, err)
		}
		for _, l := range renewed {
			if left := l.Expires.Sub(sent); left < 30*time.Minute {
				t.Fatalf("lease %q renewed for an hour while a fenced write was open: %v left, want it extended", l.Key, left)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ATakeoverWaitsForAFencedWriteInFlight", func(t *testing.T) {
		// The fence holds: a write that found its lease held commits before another holder's
		// takeover does, so the new holder reads what the old one wrote and nothing after. On an
		// exclusive database one process holds every lease, and its host takes one again only
		// after the engine under the old generation closed.
		h := open(t, newDriver)
		if h.d.Exclusive() {
			t.Skip("an exclusive database's leases are held by one process")
		}
		a, _, err := h.d.AcquireLease(ctx, "a", "node-a", "", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // past its expiry: free for anyone to take
		tx := h.fencedWrite(a, 7)
		type took struct {
			l   driver.Lease
			ok  bool
			err error
		}
		done := make(chan took, 1)
		go func() {
			l, ok, err := h.d.AcquireLease(ctx, "a", "node-b", "", time.Minute)
			done <- took{l, ok, err}
		}()
		select {
		case got := <-done:
			t.Fatalf("a takeover committed while a fenced write was in flight: %+v", got)
		case <-time.After(300 * time.Millisecond):
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("the fenced write, committed before the takeover: %v", err)
		}
		got := <-done
		if got.err != nil || !got.ok || got.l.Generation != a.Generation+1 {
			t.Fatalf("takeover after the write: %+v, want generation %d", got, a.Generation+1)
		}
	})

	t.Run("ProcessorStateFencedByLease", func(t *testing.T) {
		h := open(t, newDriver)
		l, ok, err := h.d.AcquireLease(ctx, "lease", "node-a", "", time.Minute)
		if err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		fence := &driver.Fence{Key: "lease", Generation: l.Generation}
		row := func(state string) driver.ProcessorStateRow {
			return driver.ProcessorStateRow{Path: "/s", Slug: "p", State: state, Node: "node-a", SinceMs: 1}
		}
		opsTx := func(tx driver.Tx) driver.ProcessorOpsTx {
			ot, ok := tx.(driver.ProcessorOpsTx)
			if !ok {
				t.Skip("the driver keeps no processor state")
			}
			return ot
		}
		h.write(func(tx driver.Tx) error { return opsTx(tx).PutProcessorState(ctx, row("failing"), fence) })
		if err := h.d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := h.d.AcquireLease(ctx, "lease", "node-b", "", time.Minute); err != nil || !ok {
			t.Fatalf("takeover: %v %v", ok, err)
		}
		// node-a, past its lease, neither writes nor removes the row.
		h.write(func(tx driver.Tx) error {
			if err := opsTx(tx).PutProcessorState(ctx, row("paused"), fence); !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("put with a stale fence: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		h.write(func(tx driver.Tx) error {
			if err := opsTx(tx).DeleteProcessorStateRow(ctx, "/s", "p", fence); !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("delete with a stale fence: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		h.read(func(q driver.Reader) error {
			rows, err := q.(driver.ProcessorOpsReader).ProcessorStates(ctx, driver.ProcessorStateQuery{Path: "/s"})
			if err != nil || len(rows) != 1 || rows[0].State != "failing" {
				t.Errorf("rows: got %+v %v, want the fenced write only", rows, err)
			}
			return nil
		})
	})

	t.Run("ProcessorStatesOfAListOfPaths", func(t *testing.T) {
		h := open(t, newDriver)
		rows := []driver.ProcessorStateRow{
			{Path: "/a", Slug: "p", State: "failing", SinceMs: 1}, {Path: "/b", Slug: "p", State: "paused", SinceMs: 2},
			{Path: "/b", Slug: "q", State: "paused", SinceMs: 3}, {Path: "/c", Slug: "p", State: "failing", SinceMs: 4},
			{Path: "/é<&>", Slug: "p", State: "paused", SinceMs: 5},
		}
		h.write(func(tx driver.Tx) error {
			ot, ok := tx.(driver.ProcessorOpsTx)
			if !ok {
				t.Skip("the driver keeps no processor state")
			}
			for _, r := range rows {
				if err := ot.PutProcessorState(ctx, r, nil); err != nil {
					return err
				}
			}
			return nil
		})
		// Many paths, most of them without a row, in one query.
		many := []string{"/a", "/b", "/é<&>", "/d"}
		for i := range 1500 {
			many = append(many, fmt.Sprintf("/none/%d", i))
		}
		for _, c := range []struct {
			name string
			q    driver.ProcessorStateQuery
			want []string // path/slug
		}{
			{"paths and slug", driver.ProcessorStateQuery{Paths: many, Slug: "p"}, []string{"/a/p", "/b/p", "/é<&>/p"}},
			{"paths", driver.ProcessorStateQuery{Paths: []string{"/b", "/c"}}, []string{"/b/p", "/b/q", "/c/p"}},
			{"paths and state", driver.ProcessorStateQuery{Paths: []string{"/a", "/b", "/c"}, State: "failing"}, []string{"/a/p", "/c/p"}},
			{"no paths", driver.ProcessorStateQuery{Paths: []string{}}, nil},
		} {
			h.read(func(q driver.Reader) error {
				got, err := q.(driver.ProcessorOpsReader).ProcessorStates(ctx, c.q)
				var keys []string
				for _, r := range got {
					keys = append(keys, r.Path+"/"+r.Slug)
				}
				if err != nil || !slices.Equal(keys, c.want) {
					t.Errorf("%s: got %v %v, want %v", c.name, keys, err, c.want)
				}
				return nil
			})
		}
	})

	t.Run("CheckpointsOfSlugInAListOfScopes", func(t *testing.T) {
		h := open(t, newDriver)
		h.write(func(tx driver.Tx) error {
			for _, w := range []driver.CheckpointWrite{
				{Scope: "/a", Slug: "p", StateChanged: true, Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 3, State: []byte(`{"n":3}`)}},
				{Scope: "/b", Slug: "p", Checkpoint: foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 5}},
				{Scope: "/b", Slug: "q", StateChanged: true, Checkpoint: foldtype.Checkpoint{ReducerVersion: "7", ReducedThroughOffset: 1, State: []byte(`{}`)}},
				{Scope: "/c", Slug: "p", Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 9}},
				{Scope: "/é<&>", Slug: "p", Checkpoint: foldtype.Checkpoint{ReducerVersion: "3", ReducedThroughOffset: 2}},
			} {
				if err := tx.WriteCheckpoint(ctx, w); err != nil {
					return err
				}
			}
			return nil
		})
		scopes := []string{"/a", "/b", "/é<&>", "/d"}
		for i := range 1500 {
			scopes = append(scopes, fmt.Sprintf("/none/%d", i))
		}
		got := map[string]foldtype.Checkpoint{}
		h.read(func(q driver.Reader) error {
			return q.CheckpointsOfSlug(ctx, "p", scopes, func(scope string, cp foldtype.Checkpoint) {
				cp.State = slices.Clone(cp.State)
				got[scope] = cp
			})
		})
		want := map[string]foldtype.Checkpoint{
			"/a":    {ReducerVersion: "1", ReducedThroughOffset: 3, State: []byte(`{"n":3}`)},
			"/b":    {ReducerVersion: "2", ReducedThroughOffset: 5},
			"/é<&>": {ReducerVersion: "3", ReducedThroughOffset: 2},
		}
		if len(got) != len(want) {
			t.Errorf("rows of p: got %v, want %v", got, want)
		}
		for scope, w := range want {
			g, ok := got[scope]
			if !ok || g.ReducerVersion != w.ReducerVersion || g.ReducedThroughOffset != w.ReducedThroughOffset || string(g.State) != string(w.State) {
				t.Errorf("%s: got %+v (found %v), want %+v", scope, g, ok, w)
			}
		}
		h.read(func(q driver.Reader) error {
			return q.CheckpointsOfSlug(ctx, "p", nil, func(scope string, _ foldtype.Checkpoint) {
				t.Errorf("no scopes: got a row of %s", scope)
			})
		})
	})

	t.Run("ParkedEvents", func(t *testing.T) {
		h := open(t, newDriver)
		l, ok, err := h.d.AcquireLease(ctx, "lease", "node-a", "", time.Minute)
		if err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		fence := &driver.Fence{Key: "lease", Generation: l.Generation}
		parkedTx := func(tx driver.Tx) driver.ParkedEventsTx {
			pt, ok := tx.(driver.ParkedEventsTx)
			if !ok {
				t.Skip("the driver keeps no parked events")
			}
			return pt
		}
		list := func(q driver.ParkedEventQuery) []driver.ParkedEventRow {
			var out []driver.ParkedEventRow
			h.read(func(r driver.Reader) error {
				var err error
				out, err = r.(driver.ParkedEventsReader).ParkedEvents(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				return nil
			})
			return out
		}
		row := func(path string, off int64, code string) driver.ParkedEventRow {
			return driver.ParkedEventRow{Path: path, Slug: "p", Offset: off, EventType: "order", Code: code,
				Message: "boom", Attempts: 3, Node: "node-a", AtMs: 1000 + off, By: "ops", Reason: "poison"}
		}
		h.write(func(tx driver.Tx) error {
			pt := parkedTx(tx)
			for _, r := range []driver.ParkedEventRow{row("/s", 9, "X"), row("/s", 4, "X"), row("/t", 2, "X")} {
				if err := pt.PutParkedEvent(ctx, r, fence); err != nil {
					return err
				}
			}
			return pt.PutParkedEvent(ctx, row("/s", 9, "Y"), fence) // replaces the row at 9
		})
		got := list(driver.ParkedEventQuery{Path: "/s", Slug: "p"})
		if len(got) != 2 || got[0] != row("/s", 4, "X") || got[1] != row("/s", 9, "Y") {
			t.Fatalf("parked of /s: got %+v, want offsets 4 then 9 (9 replaced)", got)
		}
		if got := list(driver.ParkedEventQuery{}); len(got) != 3 {
			t.Fatalf("every parked event: got %d, want 3", len(got))
		}
		h.read(func(r driver.Reader) error {
			n, err := r.(driver.ParkedEventsReader).ParkedEventCounts(ctx)
			if err != nil || len(n) != 1 || n["p"] != 3 {
				t.Errorf("counts: got %v %v, want p: 3", n, err)
			}
			return nil
		})
		if got := list(driver.ParkedEventQuery{Path: "/s", Slug: "p", Offset: 4}); len(got) != 1 || got[0].Offset != 4 {
			t.Fatalf("parked at 4: got %+v", got)
		}

		// A node past its lease neither parks nor removes.
		if err := h.d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := h.d.AcquireLease(ctx, "lease", "node-b", "", time.Minute); err != nil || !ok {
			t.Fatalf("takeover: %v %v", ok, err)
		}
		h.write(func(tx driver.Tx) error {
			if err := parkedTx(tx).PutParkedEvent(ctx, row("/s", 11, "X"), fence); !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("park with a stale fence: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		h.write(func(tx driver.Tx) error {
			if _, err := parkedTx(tx).DeleteParkedEvent(ctx, "/s", "p", 4, fence); !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("remove with a stale fence: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		if got := list(driver.ParkedEventQuery{Path: "/s"}); len(got) != 2 {
			t.Fatalf("after stale writes: got %+v, want the two rows as they were", got)
		}

		// Unfenced removal reports whether there was a row.
		h.write(func(tx driver.Tx) error {
			pt := parkedTx(tx)
			if removed, err := pt.DeleteParkedEvent(ctx, "/s", "p", 4, nil); err != nil || !removed {
				t.Errorf("remove 4: got %v %v, want removed", removed, err)
			}
			if removed, err := pt.DeleteParkedEvent(ctx, "/s", "p", 4, nil); err != nil || removed {
				t.Errorf("remove 4 again: got %v %v, want nothing removed", removed, err)
			}
			return nil
		})

		// Deleting a stream's processor state removes its parked events, not another stream's.
		h.write(func(tx driver.Tx) error { return tx.DeleteProcessorState(ctx, "/s") })
		if got := list(driver.ParkedEventQuery{}); len(got) != 1 || got[0].Path != "/t" {
			t.Fatalf("after deleting /s's processor state: got %+v, want /t's row only", got)
		}
	})

	t.Run("CheckpointFencedByLease", func(t *testing.T) {
		h := open(t, newDriver)
		l, ok, err := h.d.AcquireLease(ctx, "lease", "node-a", "", time.Minute)
		if err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		gen := l.Generation
		h.write(func(tx driver.Tx) error {
			return tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p", StateChanged: true,
				Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 3, State: []byte(`{"n":3}`)},
				Fence:      &driver.Fence{Key: "lease", Generation: gen}})
		})
		if _, ok, err := h.d.AcquireLease(ctx, "lease", "node-b", "", time.Minute); err != nil || ok {
			t.Fatalf("acquire of a held lease: %v %v", ok, err)
		}
		if err := h.d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := h.d.AcquireLease(ctx, "lease", "node-b", "", time.Minute); err != nil || !ok {
			t.Fatalf("takeover: %v %v", ok, err)
		}
		h.write(func(tx driver.Tx) error {
			err := tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p", StateChanged: true,
				Checkpoint: foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 9, State: []byte(`{"n":9}`)},
				Fence:      &driver.Fence{Key: "lease", Generation: gen}})
			if !errors.Is(err, foldtype.ErrLeaseLost) {
				t.Errorf("stale fence: got %v, want LEASE_LOST", err)
			}
			return nil
		})
		h.read(func(q driver.Reader) error {
			cp, ok, err := q.Checkpoint(ctx, "/s", "p")
			if err != nil || !ok || cp.ReducedThroughOffset != 3 || string(cp.State) != `{"n":3}` {
				t.Errorf("checkpoint: got %+v %v %v, want the fenced write only", cp, ok, err)
			}
			return nil
		})
		// A write without a state change keeps the stored state.
		h.write(func(tx driver.Tx) error {
			return tx.WriteCheckpoint(ctx, driver.CheckpointWrite{Scope: "/s", Slug: "p",
				Checkpoint: foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 4}})
		})
		h.read(func(q driver.Reader) error {
			cp, _, err := q.Checkpoint(ctx, "/s", "p")
			if err != nil || cp.ReducerVersion != "2" || cp.ReducedThroughOffset != 4 || string(cp.State) != `{"n":3}` {
				t.Errorf("checkpoint without state: got %+v %v", cp, err)
			}
			return nil
		})
	})
}
