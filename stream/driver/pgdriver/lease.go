package pgdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// Leases: which node runs a processor.
//
// A lease row (key, holder, generation, expires_at) says that holder runs the work named by key
// until expires_at, by the database's clock (so nodes' clocks never need to agree). The holder
// renews it well before it expires; when the holder dies, the lease runs out and another node
// takes it over, bumping the generation. Every checkpoint write of the holder carries its
// generation as a fence (driver.Fence), checked inside the write's transaction: a node that lost
// its lease — paused, partitioned, or just slow to notice — writes nothing once another node took
// over.

// Lease is a held lease.
type Lease struct {
	// Key names what the lease is for.
	Key string
	// Generation is the fence: it grows every time the lease changes hands.
	Generation int64
	// Expires is when the lease runs out unless renewed, by this node's clock: the database's
	// expiry converted with the round trip's start time, so it errs early.
	Expires time.Time
}

// Fence returns the fence checkpoint writes made under the lease carry.
func (l Lease) Fence() *driver.Fence { return &driver.Fence{Key: l.Key, Generation: l.Generation} }

// AcquireLease takes the lease named key for ttl when it is free, expired, or already this
// node's; ok is false when another node holds it. addr is where this node serves (other nodes ask
// the holder for state it alone has). Taking a lease over — or retaking one this node held
// before — bumps its generation.
func (d *Driver) AcquireLease(ctx context.Context, key, addr string, ttl time.Duration) (Lease, bool, error) {
	start := time.Now()
	var gen int64
	var leftMs int64
	err := d.pool.QueryRow(ctx, `INSERT INTO leases AS l (key, holder, holder_addr, generation, expires_at)
		VALUES ($1, $2, $3, 1, clock_timestamp() + $4 * interval '1 millisecond')
		ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, holder_addr = excluded.holder_addr,
		  generation = l.generation + 1, expires_at = excluded.expires_at
		WHERE l.expires_at < clock_timestamp() OR l.holder = excluded.holder
		RETURNING generation, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint`, key, d.node, addr, ttl.Milliseconds()).Scan(&gen, &leftMs)
	if isNoRows(err) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, d.classify(fmt.Errorf("acquire lease %q: %w", key, err))
	}
	return Lease{Key: key, Generation: gen, Expires: start.Add(time.Duration(leftMs) * time.Millisecond)}, true, nil
}

// RenewLease extends a held lease by ttl. It fails with ok=false when the lease changed hands
// (its generation moved on): the holder must stop the work at once. A lease that ran out but
// that nobody took over is still renewed — no other node wrote under it.
func (d *Driver) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, bool, error) {
	start := time.Now()
	var leftMs int64
	err := d.pool.QueryRow(ctx, `UPDATE leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond'
		WHERE key = $1 AND holder = $2 AND generation = $3
		RETURNING (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint`, l.Key, d.node, l.Generation, ttl.Milliseconds()).Scan(&leftMs)
	if isNoRows(err) {
		return Lease{}, false, nil
	}
	if err != nil {
		return l, true, d.classify(fmt.Errorf("renew lease %q: %w", l.Key, err))
	}
	l.Expires = start.Add(time.Duration(leftMs) * time.Millisecond)
	return l, true, nil
}

// ReleaseLease gives a held lease up at once (a graceful shutdown), so another node takes it
// over without waiting for it to run out.
func (d *Driver) ReleaseLease(ctx context.Context, l Lease) error {
	_, err := d.pool.Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() - interval '1 millisecond'
		WHERE key = $1 AND holder = $2 AND generation = $3`, l.Key, d.node, l.Generation)
	if err != nil {
		return d.classify(fmt.Errorf("release lease %q: %w", l.Key, err))
	}
	return nil
}

// LeaseHolder returns who holds the lease named key: the holder's node id and address, and
// whether it is still unexpired.
func (d *Driver) LeaseHolder(ctx context.Context, key string) (holder, addr string, live bool, err error) {
	err = d.pool.QueryRow(ctx, `SELECT holder, holder_addr, expires_at > clock_timestamp() FROM leases WHERE key = $1`, key).
		Scan(&holder, &addr, &live)
	if isNoRows(err) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, d.classify(fmt.Errorf("lease holder %q: %w", key, err))
	}
	return holder, addr, live, nil
}

// sweepEphemerals deletes large ephemeral payloads past their retention, every few seconds.
func (d *Driver) sweepEphemerals() {
	defer d.bg.Done()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := d.pool.Exec(ctx, `DELETE FROM ephemeral_payloads WHERE created_at < clock_timestamp() - $1 * interval '1 millisecond'`,
				d.cfg.EphemeralRetention.Milliseconds())
			cancel()
			if err != nil {
				d.log.Debug("postgres: sweep ephemeral payloads", "err", err)
			}
		}
	}
}
