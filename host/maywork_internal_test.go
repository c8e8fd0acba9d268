package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// leaseDB is a lease table for leaseSet's renewals: it renews what the holder still holds at its
// generation, answering after delay, and computes the expiry when it answers (as a driver that
// counts from the answer would).
type leaseDB struct {
	driver.Driver
	mu       sync.Mutex
	gen      map[string]int64 // key -> generation this node holds; another node took it when it differs
	delay    time.Duration
	renewals int
}

func (d *leaseDB) RenewLeases(ctx context.Context, holder string, held []driver.Lease, ttl time.Duration) ([]driver.Lease, error) {
	d.mu.Lock()
	d.renewals++
	delay := d.delay
	d.mu.Unlock()
	time.Sleep(delay) // the round trip: the answer arrives after delay
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []driver.Lease
	for _, l := range held {
		if g, ok := d.gen[l.Key]; ok && g == l.Generation {
			l.Expires = time.Now().Add(ttl)
			out = append(out, l)
		}
	}
	return out, nil
}

func (d *leaseDB) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.renewals
}

func (d *leaseDB) set(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// TestALeasePastItsLocalDeadlineRunsNoWorkUntilARenewalConfirmsIt: under the fake clock, a lease
// held within its local deadline lets work start without asking the database; once a freeze
// carried the process past that deadline, mayWork renews first — and lets the work go on when
// nobody took the lease, refuses it with LEASE_LOST (and forgets the lease) when another node
// did, and refuses it (giving the engine up, to be taken over afresh) when the renewal's answers
// came back after the deadline they would have set, however long the database says the lease
// now lasts.
func TestALeasePastItsLocalDeadlineRunsNoWorkUntilARenewalConfirmsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		ctx := context.Background()
		db := &leaseDB{gen: map[string]int64{}}
		h := &Host{log: slog.New(slog.NewTextHandler(io.Discard, nil)), slots: map[procKey]*slot{}}
		ls := &leaseSet{h: h, drv: db, node: "me", ttl: ttl, margin: leaseMargin(ttl),
			held: map[procKey]driver.Lease{}, view: map[procKey]driver.Lease{}, renewing: make(chan struct{}, 1),
			me: driver.Lease{Key: nodePrefix + "me", Holder: "me", Generation: 1}}
		h.leases = ls
		hold := func(key procKey, gen int64) {
			now := time.Now()
			db.set(func() { db.gen[leaseKey(key)] = gen; db.gen[ls.me.Key] = 1 })
			ls.mu.Lock()
			ls.held[key] = localDeadline(driver.Lease{Key: leaseKey(key), Holder: "me", Generation: gen, Expires: now.Add(ttl)}, now, ttl)
			ls.mu.Unlock()
		}
		key := procKey{"/s/a", "p"}
		hold(key, 1)

		// Within the deadline: no round trip.
		time.Sleep(ttl - ls.margin - time.Millisecond)
		if err := ls.mayWork(ctx, key, 1); err != nil || db.count() != 0 {
			t.Fatalf("within the deadline: %v after %d renewals, want nil after none", err, db.count())
		}
		// A freeze past the deadline, nobody took the lease: one renewal, then the work goes on.
		time.Sleep(2 * ttl)
		if err := ls.mayWork(ctx, key, 1); err != nil || db.count() != 1 {
			t.Fatalf("past the deadline, lease still ours: %v after %d renewals, want nil after one", err, db.count())
		}
		if err := ls.mayWork(ctx, key, 1); err != nil || db.count() != 1 {
			t.Fatalf("right after the renewal: %v after %d renewals, want nil after one", err, db.count())
		}
		// A freeze past the deadline, another node took the lease: refused, and the lease is gone.
		time.Sleep(3 * ttl)
		db.set(func() { db.gen[leaseKey(key)] = 2 })
		if err := ls.mayWork(ctx, key, 1); !errors.Is(err, foldtype.ErrLeaseLost) {
			t.Fatalf("past the deadline, lease taken over: %v, want LEASE_LOST", err)
		}
		if _, ok := ls.heldLease(key); ok {
			t.Fatal("the lease taken over is still held")
		}
		// A renewal whose answer arrives after the deadline it would set extends nothing: the
		// database granted the lease from when it was asked, and may have given it away since.
		other := procKey{"/s/b", "p"}
		hold(other, 1)
		time.Sleep(2 * ttl)
		db.set(func() { db.delay = 2 * ttl })
		before := db.count()
		if err := ls.mayWork(ctx, other, 1); !errors.Is(err, foldtype.ErrLeaseLost) {
			t.Fatalf("renewals answered late: %v, want LEASE_LOST", err)
		}
		if n := db.count() - before; n != confirmAttempts {
			t.Fatalf("%d renewals asked for, want %d", n, confirmAttempts)
		}
		if _, ok := ls.heldLease(other); ok {
			t.Fatal("after late answers the lease is still held: its engine would wait for a push")
		}
	})
}
