package pgdriver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// Leases: which node runs a processor (driver.Driver's lease operations).
//
// A lease row (key, holder, holder_addr, generation, expires_at) says that holder runs the work
// named by key until expires_at, by the database's clock (so nodes' clocks never need to agree).
// The holder renews it well before it expires; when the holder dies, the lease runs out and
// another node takes it over, bumping the generation. Every checkpoint write of the holder
// carries its generation as a fence (driver.Fence), checked inside the write's transaction: a node
// that lost its lease — paused, partitioned, or just slow to notice — writes nothing once another
// node took over. A lease released idle is left at the epoch; one released for a handoff reads
// as just expired. Each operation is one statement in its own transaction.

// leaseLeft is the SQL of a lease row's remaining time in milliseconds (negative once expired).
const leaseLeft = `(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint`

// AcquireLease takes the lease named key for ttl when it is free, expired, released or already
// holder's (see driver.Driver). Every acquisition increments the generation.
func (d *Driver) AcquireLease(ctx context.Context, key, holder, addr string, ttl time.Duration) (driver.Lease, bool, error) {
	start := time.Now()
	var gen, leftMs int64
	err := d.pool.QueryRow(ctx, `INSERT INTO leases AS l (key, holder, holder_addr, generation, expires_at)
		VALUES ($1, $2, $3, 1, clock_timestamp() + $4 * interval '1 millisecond')
		ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, holder_addr = excluded.holder_addr,
		  generation = l.generation + 1, expires_at = excluded.expires_at, status = ''
		WHERE l.expires_at < clock_timestamp() OR l.holder = excluded.holder
		RETURNING generation, `+leaseLeft, key, holder, addr, ttl.Milliseconds()).Scan(&gen, &leftMs)
	if isNoRows(err) {
		return driver.Lease{}, false, nil
	}
	if err != nil {
		return driver.Lease{}, false, d.classify(fmt.Errorf("acquire lease %q: %w", key, err))
	}
	return driver.Lease{Key: key, Holder: holder, Addr: addr, Generation: gen, Live: true,
		Expires: start.Add(time.Duration(leftMs) * time.Millisecond)}, true, nil
}

// RenewLeases extends, in one statement, every lease of held that holder still holds at its
// generation and did not release. A fenced write's lock on a lease row (FOR KEY SHARE, held until
// its group commits) does not conflict with the renewal's (FOR NO KEY UPDATE), so a busy
// processor's lease is extended like any other. Rows another statement has locked for an update
// right now (a takeover's attempt, a release) are skipped (SKIP LOCKED) rather than waited for, so
// one slow statement never holds up the renewal of the others; a skipped lease is read back and
// returned as still held, at its current expiry, when it did not change hands, and the next
// renewal extends it.
func (d *Driver) RenewLeases(ctx context.Context, holder string, held []driver.Lease, ttl time.Duration) ([]driver.Lease, error) {
	if len(held) == 0 {
		return nil, nil
	}
	keys := make([]string, len(held))
	gens := make([]int64, len(held))
	statuses := make([]string, len(held))
	byKey := make(map[string]driver.Lease, len(held))
	for i, l := range held {
		keys[i], gens[i], statuses[i] = l.Key, l.Generation, l.Status
		byKey[l.Key] = l
	}
	start := time.Now()
	var out []driver.Lease
	scan := func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var key string
			var leftMs int64
			if err := rows.Scan(&key, &leftMs); err != nil {
				return err
			}
			l := byKey[key]
			delete(byKey, key)
			l.Live, l.Idle = true, false
			l.Expires = start.Add(time.Duration(leftMs) * time.Millisecond)
			out = append(out, l)
		}
		return rows.Err()
	}
	rows, err := d.pool.Query(ctx, `WITH mine AS (
		  SELECT l.key, h.status FROM leases AS l JOIN unnest($2::text[], $3::bigint[], $5::text[]) AS h(key, generation, status)
		    ON l.key = h.key AND l.generation = h.generation
		  WHERE l.holder = $1 AND l.expires_at >= '1970-01-02'::timestamptz
		  FOR NO KEY UPDATE OF l SKIP LOCKED)
		UPDATE leases AS l SET expires_at = clock_timestamp() + $4 * interval '1 millisecond',
		  status = CASE WHEN mine.status = '' THEN l.status ELSE mine.status END
		FROM mine WHERE l.key = mine.key
		RETURNING l.key, `+leaseLeft, holder, keys, gens, ttl.Milliseconds(), statuses)
	if err == nil {
		err = scan(rows)
	}
	if err != nil {
		return nil, d.classify(fmt.Errorf("renew leases: %w", err))
	}
	if len(byKey) == 0 {
		return out, nil
	}
	// Skipped (locked now) or changed hands: keep those still this holder's at their generation.
	keys, gens = keys[:0], gens[:0]
	for k, l := range byKey {
		keys, gens = append(keys, k), append(gens, l.Generation)
	}
	rows, err = d.pool.Query(ctx, `SELECT l.key, `+leaseLeft+` FROM leases AS l
		JOIN unnest($2::text[], $3::bigint[]) AS h(key, generation) ON l.key = h.key AND l.generation = h.generation
		WHERE l.holder = $1 AND l.expires_at >= '1970-01-02'::timestamptz`, holder, keys, gens)
	if err == nil {
		err = scan(rows)
	}
	if err != nil {
		return nil, d.classify(fmt.Errorf("renew leases: %w", err))
	}
	return out, nil
}

// ReleaseLease gives l up at once when its holder still holds it at its generation: idle leaves
// it at the epoch (nothing to do), otherwise one second after it (expired, and never renewed:
// RenewLeases skips every lease released before 1970-01-02). Released for a takeover (not idle),
// the same statement announces it on the schema's notification channel (the other nodes'
// WatchLeases), and the watchers of this process hear of it when it returns.
func (d *Driver) ReleaseLease(ctx context.Context, l driver.Lease, idle bool) error {
	note, _ := json.Marshal(wireNote{Node: d.node, Released: []string{l.Key}, Holder: l.Holder})
	announce := `, pg_notify($5, $6)`
	if idle || len(note) > maxNotifyPayload {
		// Idle: nobody needs to take it. Too long a key to announce: the others see it at
		// their next scan.
		announce = `, $5::text, $6::text`
	}
	var released int
	err := d.pool.QueryRow(ctx, `WITH u AS (
		  UPDATE leases SET expires_at = CASE WHEN $4 THEN 'epoch'::timestamptz
		    ELSE 'epoch'::timestamptz + interval '1 second' END
		  WHERE key = $1 AND holder = $2 AND generation = $3 AND expires_at >= '1970-01-02'::timestamptz RETURNING key)
		SELECT count(*) FROM (SELECT key`+announce+` FROM u) AS n`,
		l.Key, l.Holder, l.Generation, idle, d.channel, string(note)).Scan(&released)
	if err != nil {
		return d.classify(fmt.Errorf("release lease %q: %w", l.Key, err))
	}
	if released > 0 && !idle {
		d.leaseWatchers.Released(l.Key, l.Holder)
	}
	return nil
}

// ReleaseLeases gives up, in one statement, every lease of ls its holder still holds at its
// generation (driver.LeaseBatchReleaser), as ReleaseLease does each. Released for a takeover, the
// same statement announces them: their keys go in as few notifications as fit under NOTIFY's
// payload limit (a key too long to announce is found by the next scans).
func (d *Driver) ReleaseLeases(ctx context.Context, ls []driver.Lease, idle bool) error {
	byHolder := map[string][]driver.Lease{}
	var holders []string
	for _, l := range ls {
		if _, ok := byHolder[l.Holder]; !ok {
			holders = append(holders, l.Holder)
		}
		byHolder[l.Holder] = append(byHolder[l.Holder], l)
	}
	for _, h := range holders {
		if err := d.releaseLeasesOf(ctx, h, byHolder[h], idle); err != nil {
			return err
		}
	}
	return nil
}

// releaseNoteBytes is the most key text one release notification carries (NOTIFY's limit is
// 8,000 bytes; the rest of the payload is the node id and the holder).
const releaseNoteBytes = 6000

func (d *Driver) releaseLeasesOf(ctx context.Context, holder string, ls []driver.Lease, idle bool) error {
	keys := make([]string, len(ls))
	gens := make([]int64, len(ls))
	for i, l := range ls {
		keys[i], gens[i] = l.Key, l.Generation
	}
	var released []string
	var notes int64
	err := d.pool.QueryRow(ctx, `WITH u AS (
		  UPDATE leases AS l SET expires_at = CASE WHEN $4 THEN 'epoch'::timestamptz
		    ELSE 'epoch'::timestamptz + interval '1 second' END
		  FROM unnest($1::text[], $2::bigint[]) AS r(key, generation)
		  WHERE l.key = r.key AND l.holder = $3 AND l.generation = r.generation
		    AND l.expires_at >= '1970-01-02'::timestamptz
		  RETURNING l.key),
		c AS (
		  SELECT key, sum(octet_length(to_json(key)::text) + 1) OVER (ORDER BY key) / $7 AS chunk FROM u
		  WHERE NOT $4 AND octet_length(to_json(key)::text) < $7),
		n AS (
		  SELECT pg_notify($5, json_build_object('n', $6::text, 'r', array_agg(key ORDER BY key), 'h', $3::text)::text)
		  FROM c GROUP BY chunk)
		SELECT (SELECT count(*) FROM n), array_agg(key) FROM u`,
		keys, gens, holder, idle, d.channel, d.node, int64(releaseNoteBytes)).Scan(&notes, &released)
	if err != nil {
		return d.classify(fmt.Errorf("release leases: %w", err))
	}
	if !idle {
		for _, k := range released {
			d.leaseWatchers.Released(k, holder)
		}
	}
	return nil
}

// WatchLeases calls fn for every lease released by this process or announced by another node.
func (d *Driver) WatchLeases(fn func(key, holder string)) (stop func()) {
	return d.leaseWatchers.WatchLeases(fn)
}

// leaseColumns are the columns Leases scans, in order.
const leaseColumns = `key, holder, holder_addr, generation, ` + leaseLeft + `, expires_at = 'epoch'::timestamptz, status`

// Leases runs every query of qs in one round trip (a pipelined batch) and returns their results
// in order, each in key order.
func (d *Driver) Leases(ctx context.Context, qs ...driver.LeaseQuery) ([]driver.Lease, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	start := time.Now()
	b := &pgx.Batch{}
	for _, q := range qs {
		var keys any
		if q.Keys != nil {
			keys = q.Keys
		}
		var limit any
		if q.Limit > 0 {
			limit = int64(q.Limit)
		}
		b.Queue(`SELECT `+leaseColumns+` FROM leases
			WHERE starts_with(key, $1) AND ($2::text[] IS NULL OR key = ANY($2::text[]))
			  AND (NOT $3 OR expires_at > clock_timestamp())
			  AND (NOT $4 OR (expires_at <= clock_timestamp() AND expires_at <> 'epoch'::timestamptz))
			  AND ($5 = '' OR key > $5)
			ORDER BY key LIMIT $6::bigint`, q.Prefix, keys, q.Live, q.Free, q.After, limit)
	}
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	var out []driver.Lease
	for range qs {
		rows, err := br.Query()
		if err != nil {
			return nil, d.classify(fmt.Errorf("list leases: %w", err))
		}
		for rows.Next() {
			var l driver.Lease
			var leftMs int64
			if err := rows.Scan(&l.Key, &l.Holder, &l.Addr, &l.Generation, &leftMs, &l.Idle, &l.Status); err != nil {
				rows.Close()
				return nil, d.classify(fmt.Errorf("list leases: %w", err))
			}
			l.Live = leftMs > 0
			if !l.Idle {
				l.Expires = start.Add(time.Duration(leftMs) * time.Millisecond)
			}
			out = append(out, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, d.classify(fmt.Errorf("list leases: %w", err))
		}
	}
	return out, nil
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
