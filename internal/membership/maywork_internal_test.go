package membership

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// leaseDB is a lease table for a Service's renewals: it renews what the holder still holds at its
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
// carried the process past that deadline, MayWork renews first — and lets the work go on when
// nobody took the lease, refuses it with ErrLost (the host's LEASE_LOST; it forgets the lease and
// stops the work) when another node did, and refuses it (giving the work up, to be taken over
// afresh) when the renewal's answers
// came back after the deadline they would have set, however long the database says the lease
// now lasts.
func TestALeasePastItsLocalDeadlineRunsNoWorkUntilARenewalConfirmsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		ctx := context.Background()
		db := &leaseDB{gen: map[string]int64{}}
		work := &lostWork{}
		ls := newService(Config{Driver: db, Node: "me", TTL: ttl, Prefix: "processor\x1f", Work: work,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ls.me.Generation = 1
		hold := func(key string, gen int64) {
			now := time.Now()
			db.set(func() { db.gen[key] = gen; db.gen[ls.me.Key] = 1 })
			ls.mu.Lock()
			ls.held[key] = LocalDeadline(driver.Lease{Key: key, Holder: "me", Generation: gen, Expires: now.Add(ttl)}, now, ttl)
			ls.mu.Unlock()
		}
		key := "processor\x1f/s/a\x1fp"
		hold(key, 1)

		// Within the deadline: no round trip.
		time.Sleep(ttl - ls.margin - time.Millisecond)
		if err := ls.MayWork(ctx, key, 1); err != nil || db.count() != 0 {
			t.Fatalf("within the deadline: %v after %d renewals, want nil after none", err, db.count())
		}
		// A freeze past the deadline, nobody took the lease: one renewal, then the work goes on.
		time.Sleep(2 * ttl)
		if err := ls.MayWork(ctx, key, 1); err != nil || db.count() != 1 {
			t.Fatalf("past the deadline, lease still ours: %v after %d renewals, want nil after one", err, db.count())
		}
		if err := ls.MayWork(ctx, key, 1); err != nil || db.count() != 1 {
			t.Fatalf("right after the renewal: %v after %d renewals, want nil after one", err, db.count())
		}
		// A freeze past the deadline, another node took the lease: refused, and the lease is gone.
		time.Sleep(3 * ttl)
		db.set(func() { db.gen[key] = 2 })
		if err := ls.MayWork(ctx, key, 1); !errors.Is(err, ErrLost) {
			t.Fatalf("past the deadline, lease taken over: %v, want ErrLost", err)
		}
		if _, ok := ls.Held(key); ok {
			t.Fatal("the lease taken over is still held")
		}
		// A renewal whose answer arrives after the deadline it would set extends nothing: the
		// database granted the lease from when it was asked, and may have given it away since.
		other := "processor\x1f/s/b\x1fp"
		hold(other, 1)
		time.Sleep(2 * ttl)
		db.set(func() { db.delay = 2 * ttl })
		before := db.count()
		if err := ls.MayWork(ctx, other, 1); !errors.Is(err, ErrLost) {
			t.Fatalf("renewals answered late: %v, want ErrLost", err)
		}
		if n := db.count() - before; n != confirmAttempts {
			t.Fatalf("%d renewals asked for, want %d", n, confirmAttempts)
		}
		if _, ok := ls.Held(other); ok {
			t.Fatal("after late answers the lease is still held: its engine would wait for a push")
		}
		if got := work.stopped(); len(got) != 2 || got[0] != key || got[1] != other {
			t.Fatalf("work stopped for %q, want the lease taken over and the one never confirmed", got)
		}
	})
}

// lostWork is a Work that records the keys the service stopped.
type lostWork struct {
	mu   sync.Mutex
	lost []string
}

func (w *lostWork) Statuses() map[string]string { return nil }

// Unconfirmed declines: nothing of this work runs on, so the service gives the lease up.
func (w *lostWork) Unconfirmed(string) bool { return false }
func (w *lostWork) Lost(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lost = append(w.lost, key)
}
func (w *lostWork) stopped() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lost...)
}
func (w *lostWork) Wanted(int) []string { return nil }
func (w *lostWork) Scan()               {}
func (w *lostWork) Freed(keys []string) {}
