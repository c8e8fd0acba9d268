package membership

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// listDB is a lease table for a Service's listings: it answers with the leases set, or with err.
type listDB struct {
	driver.Driver
	mu     sync.Mutex
	leases []driver.Lease
	err    error
}

func (d *listDB) Leases(ctx context.Context, qs ...driver.LeaseQuery) ([]driver.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	return slices.Clone(d.leases), nil
}

func (d *listDB) Exclusive() bool { return false }

func (d *listDB) set(leases []driver.Lease, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leases, d.err = leases, err
}

// runsAll is a Planner for which every key's work is known here and runs nowhere on this node.
type runsAll struct{}

func (runsAll) Runnable(string) (bool, bool) { return true, false }
func (runsAll) Required() []string           { return nil }
func (runsAll) Takeable(string) bool         { return true }
func (runsAll) Handable(string) bool         { return false }

// After the database did not answer a node (it restarted: every lease lapsed meanwhile, the
// other node's node lease too), the node's next listing finds itself the only member and the other
// node's work lease lapsed; it takes that lease over only if it is still lapsed a lease time later,
// and not when its holder renewed it meanwhile (as a live node does within a quarter of a lease
// time). Before, it took every lapsed lease at once, and the holder lost its lease, and the work
// in flight under it, to a node that would hand it back.
func TestANodeTheDatabaseDidNotAnswerTakesNoLapsedLeaseUntilItsHoldersHadALeaseTimeToRenew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		ctx := context.Background()
		key := "processor\x1f/s/a\x1fp"
		db := &listDB{}
		s := newService(Config{Driver: db, Node: "me", TTL: ttl, Prefix: "processor\x1f", Work: &lostWork{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		lapsed := []driver.Lease{
			{Key: NodePrefix + "other", Holder: "other", Generation: 1},
			{Key: key, Holder: "other", Generation: 7},
		}
		live := []driver.Lease{
			{Key: NodePrefix + "other", Holder: "other", Generation: 1, Live: true, Expires: time.Now().Add(time.Hour)},
			{Key: key, Holder: "other", Generation: 7, Live: true, Expires: time.Now().Add(time.Hour)},
		}
		plan := func() []string {
			take, _ := s.Plan(runsAll{})
			return take
		}

		// A node that was never cut off takes a lapsed lease it is preferred for (the only
		// member) at once.
		db.set(lapsed, nil)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		if got := plan(); len(got) != 1 {
			t.Fatalf("a node never cut off took %q of a lapsed lease, want it", got)
		}

		// The database stops answering; when it answers again, every lease has lapsed.
		db.set(nil, errors.New("the database is unavailable"))
		if err := s.list(ctx); err == nil {
			t.Fatal("the listing did not fail")
		}
		db.set(lapsed, nil)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		if got := plan(); len(got) != 0 {
			t.Fatalf("right after the database answered again the node took %q over", got)
		}
		// The holder renews within the period: nothing is taken then either.
		time.Sleep(ttl / 4)
		db.set(live, nil)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		if got := plan(); len(got) != 0 {
			t.Fatalf("the node took %q over, which its holder renewed", got)
		}

		// Cut off again, and this time the holder is gone for good: its lease is taken over once
		// the period has passed.
		db.set(nil, errors.New("the database is unavailable"))
		_ = s.list(ctx)
		db.set(lapsed, nil)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		scan, until := s.joinScan, s.joinUntil
		s.mu.Unlock()
		if want := time.Now().Add(ttl); !until.Equal(want) || !scan.Equal(until) {
			t.Fatalf("the period runs until %v with a scan asked for at %v, want both at %v", until, scan, want)
		}
		time.Sleep(ttl - time.Millisecond)
		if got := plan(); len(got) != 0 {
			t.Fatalf("before the period ended the node took %q over", got)
		}
		time.Sleep(time.Millisecond)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		if got := plan(); len(got) != 1 || got[0] != key {
			t.Fatalf("after the period the node took %q, want the lapsed lease", got)
		}
	})
}

// A renewal that fails also marks the node cut off: its next listing starts the period.
func TestAFailedRenewalStartsAJoinPeriodAtTheNextListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		ctx := context.Background()
		db := &failingRenewals{listDB: listDB{}}
		s := newService(Config{Driver: db, Node: "me", TTL: ttl, Prefix: "processor\x1f", Work: &lostWork{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		s.renewLocked(ctx)
		if err := s.list(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		until := s.joinUntil
		s.mu.Unlock()
		if want := time.Now().Add(ttl); !until.Equal(want) {
			t.Fatalf("join period until %v, want %v (a lease time after the listing)", until, want)
		}
	})
}

// failingRenewals is a listDB whose renewals fail.
type failingRenewals struct{ listDB }

func (d *failingRenewals) RenewLeases(context.Context, string, []driver.Lease, time.Duration) ([]driver.Lease, error) {
	return nil, errors.New("the database is unavailable")
}
