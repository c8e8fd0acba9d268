package sqlitedriver

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// Leases live in memory: the file lock makes this process the only one on the database, so no
// other process can hold a lease, and none outlives the process. The rules are driver.Driver's,
// judged by this process's clock; a fenced checkpoint write checks the generation here inside its
// write transaction (the writer goroutine), so the fence costs no SQL.

type leaseTable struct {
	mu sync.Mutex
	m  map[string]*memLease
}

type memLease struct {
	driver.Lease
	released bool
}

// generation returns lease key's generation (0 when it never existed).
func (lt *leaseTable) generation(key string) int64 {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if l := lt.m[key]; l != nil {
		return l.Generation
	}
	return 0
}

// AcquireLease takes lease key for holder when it is free, expired, released or holder's.
func (d *Driver) AcquireLease(ctx context.Context, key, holder, addr string, ttl time.Duration) (driver.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return driver.Lease{}, false, err
	}
	lt := &d.leases
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := time.Now()
	l := lt.m[key]
	if l == nil {
		if lt.m == nil {
			lt.m = make(map[string]*memLease)
		}
		l = &memLease{Lease: driver.Lease{Key: key}}
		lt.m[key] = l
	} else if l.Holder != holder && !l.released && l.Expires.After(now) {
		return driver.Lease{}, false, nil
	}
	*l = memLease{Lease: driver.Lease{Key: key, Holder: holder, Addr: addr, Generation: l.Generation + 1, Expires: now.Add(ttl), Live: true}}
	return l.Lease, true, nil
}

// RenewLeases extends the leases of held that holder still holds and did not release.
func (d *Driver) RenewLeases(ctx context.Context, holder string, held []driver.Lease, ttl time.Duration) ([]driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lt := &d.leases
	lt.mu.Lock()
	defer lt.mu.Unlock()
	until := time.Now().Add(ttl)
	var out []driver.Lease
	for _, h := range held {
		l := lt.m[h.Key]
		if l == nil || l.Holder != holder || l.Generation != h.Generation || l.released {
			continue
		}
		l.Expires, l.Live = until, true
		if h.Status != "" {
			l.Status = h.Status
		}
		out = append(out, l.Lease)
	}
	return out, nil
}

// ReleaseLease gives l up when its holder still holds it at its generation.
func (d *Driver) ReleaseLease(ctx context.Context, l driver.Lease, idle bool) error {
	lt := &d.leases
	lt.mu.Lock()
	cur := lt.m[l.Key]
	if cur == nil || cur.Holder != l.Holder || cur.Generation != l.Generation || cur.released {
		lt.mu.Unlock()
		return nil
	}
	cur.released, cur.Live, cur.Idle = true, false, idle
	cur.Expires = time.Unix(0, 0)
	lt.mu.Unlock()
	if !idle {
		d.leaseWatchers.Released(l.Key, l.Holder)
	}
	return nil
}

// WatchLeases calls fn for every lease released for a takeover in this process.
func (d *Driver) WatchLeases(fn func(key, holder string)) (stop func()) {
	return d.leaseWatchers.WatchLeases(fn)
}

// Leases returns the leases each query of qs selects, in order, each in key order.
func (d *Driver) Leases(ctx context.Context, qs ...driver.LeaseQuery) ([]driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lt := &d.leases
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := time.Now()
	var out []driver.Lease
	for _, q := range qs {
		var sel []driver.Lease
		pick := func(k string, l *memLease) {
			if !strings.HasPrefix(k, q.Prefix) || (q.After != "" && k <= q.After) {
				return
			}
			c := l.Lease
			c.Live = !l.released && c.Expires.After(now)
			if (q.Live && !c.Live) || (q.Free && (c.Live || c.Idle)) {
				return
			}
			sel = append(sel, c)
		}
		if q.Keys != nil {
			seen := make(map[string]bool, len(q.Keys))
			for _, k := range q.Keys {
				if l := lt.m[k]; l != nil && !seen[k] {
					seen[k] = true
					pick(k, l)
				}
			}
		} else {
			for k, l := range lt.m {
				pick(k, l)
			}
		}
		sort.Slice(sel, func(i, j int) bool { return sel[i].Key < sel[j].Key })
		if q.Limit > 0 && len(sel) > q.Limit {
			sel = sel[:q.Limit]
		}
		out = append(out, sel...)
	}
	return out, nil
}
