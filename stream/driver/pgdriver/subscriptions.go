package pgdriver

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/foldstream/foldstream/stream/driver"
)

// Subscription rows and webhook signing keys (docs/server.md#subscriptions). A subscription's
// writers on every node serialise on a transaction-scoped advisory lock of its id, taken like a
// stream's (LockStream), so a read-change-write of the row never interleaves with another node's.

func (t *readTx) Subscription(ctx context.Context, id string) (driver.SubscriptionRow, bool, error) {
	r := driver.SubscriptionRow{ID: id}
	var cfg, st string
	err := t.tx.QueryRow(ctx, `SELECT config, state FROM subscriptions WHERE id = $1`, id).Scan(&cfg, &st)
	if isNoRows(err) {
		return driver.SubscriptionRow{}, false, nil
	}
	if err != nil {
		return driver.SubscriptionRow{}, false, t.d.classify(fmt.Errorf("load subscription %q: %w", id, err))
	}
	r.Config, r.State = []byte(cfg), []byte(st)
	return r, true, nil
}

func (t *readTx) Subscriptions(ctx context.Context) ([]driver.SubscriptionRow, error) {
	rows, err := t.tx.Query(ctx, `SELECT id, config, state FROM subscriptions ORDER BY id`)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("list subscriptions: %w", err))
	}
	defer rows.Close()
	var out []driver.SubscriptionRow
	for rows.Next() {
		var r driver.SubscriptionRow
		var cfg, st string
		if err := rows.Scan(&r.ID, &cfg, &st); err != nil {
			return nil, t.d.classify(fmt.Errorf("list subscriptions: %w", err))
		}
		r.Config, r.State = []byte(cfg), []byte(st)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("list subscriptions: %w", err))
	}
	return out, nil
}

func (t *readTx) SigningKeys(ctx context.Context) ([]driver.SigningKey, error) {
	rows, err := t.tx.Query(ctx, `SELECT kid, created_ms, seed, retired_ms FROM signing_keys ORDER BY created_ms, kid`)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("list signing keys: %w", err))
	}
	defer rows.Close()
	var out []driver.SigningKey
	for rows.Next() {
		var k driver.SigningKey
		if err := rows.Scan(&k.KID, &k.CreatedMs, &k.Seed, &k.RetiredMs); err != nil {
			return nil, t.d.classify(fmt.Errorf("list signing keys: %w", err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("list signing keys: %w", err))
	}
	return out, nil
}

// LockSubscription takes the subscription's advisory lock until the transaction ends.
func (t *writeTx) LockSubscription(ctx context.Context, id string) error {
	h := fnv.New32a()
	h.Write([]byte(id))
	return t.lock(ctx, t.d.subLockCls, int32(h.Sum32()))
}

func (t *writeTx) PutSubscription(ctx context.Context, r driver.SubscriptionRow) error {
	t.wroteInSp = true
	_, err := t.tx.Exec(ctx, `INSERT INTO subscriptions(id, config, state) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET config = excluded.config, state = excluded.state`, r.ID, string(r.Config), string(r.State))
	if err != nil {
		return t.d.classify(fmt.Errorf("store subscription %q: %w", r.ID, err))
	}
	return nil
}

func (t *writeTx) DeleteSubscription(ctx context.Context, id string) error {
	t.wroteInSp = true
	if _, err := t.tx.Exec(ctx, `DELETE FROM subscriptions WHERE id = $1`, id); err != nil {
		return t.d.classify(fmt.Errorf("delete subscription %q: %w", id, err))
	}
	return nil
}

func (t *writeTx) PutSigningKey(ctx context.Context, k driver.SigningKey) error {
	t.wroteInSp = true
	_, err := t.tx.Exec(ctx, `INSERT INTO signing_keys(kid, created_ms, seed, retired_ms) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kid) DO UPDATE SET retired_ms = excluded.retired_ms`, k.KID, k.CreatedMs, k.Seed, k.RetiredMs)
	if err != nil {
		return t.d.classify(fmt.Errorf("store signing key %q: %w", k.KID, err))
	}
	return nil
}
