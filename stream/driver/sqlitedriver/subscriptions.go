package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/foldstream/foldstream/stream/driver"
)

// schemaV5 adds the subscription rows and webhook signing keys (docs/server.md#subscriptions).
var schemaV5 = []string{
	`CREATE TABLE IF NOT EXISTS subscriptions (
		id TEXT PRIMARY KEY,
		config TEXT NOT NULL,
		state TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS signing_keys (
		kid TEXT PRIMARY KEY,
		created_ms INTEGER NOT NULL,
		seed BLOB NOT NULL,
		retired_ms INTEGER NOT NULL DEFAULT 0
	)`,
}

func (t *readTx) Subscription(ctx context.Context, id string) (driver.SubscriptionRow, bool, error) {
	r := driver.SubscriptionRow{ID: id}
	var cfg, st string
	err := t.q.queryRow(ctx, `SELECT config, state FROM subscriptions WHERE id = ?`, id).Scan(&cfg, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.SubscriptionRow{}, false, nil
	}
	if err != nil {
		return driver.SubscriptionRow{}, false, fmt.Errorf("load subscription %q: %w", id, err)
	}
	r.Config, r.State = []byte(cfg), []byte(st)
	return r, true, nil
}

func (t *readTx) Subscriptions(ctx context.Context) ([]driver.SubscriptionRow, error) {
	rows, err := t.q.query(ctx, `SELECT id, config, state FROM subscriptions ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	defer rows.Close()
	var out []driver.SubscriptionRow
	for rows.Next() {
		var r driver.SubscriptionRow
		var cfg, st string
		if err := rows.Scan(&r.ID, &cfg, &st); err != nil {
			return nil, fmt.Errorf("list subscriptions: %w", err)
		}
		r.Config, r.State = []byte(cfg), []byte(st)
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *readTx) SigningKeys(ctx context.Context) ([]driver.SigningKey, error) {
	rows, err := t.q.query(ctx, `SELECT kid, created_ms, seed, retired_ms FROM signing_keys ORDER BY created_ms, kid`)
	if err != nil {
		return nil, fmt.Errorf("list signing keys: %w", err)
	}
	defer rows.Close()
	var out []driver.SigningKey
	for rows.Next() {
		var k driver.SigningKey
		if err := rows.Scan(&k.KID, &k.CreatedMs, &k.Seed, &k.RetiredMs); err != nil {
			return nil, fmt.Errorf("list signing keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// LockSubscription does nothing: the store's one writer is the only writer of the file.
func (t *writeTx) LockSubscription(ctx context.Context, id string) error { return nil }

func (t *writeTx) PutSubscription(ctx context.Context, r driver.SubscriptionRow) error {
	_, err := t.q.exec(ctx, `INSERT INTO subscriptions(id, config, state) VALUES (?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET config = excluded.config, state = excluded.state`, r.ID, string(r.Config), string(r.State))
	if err != nil {
		return classify(fmt.Errorf("store subscription %q: %w", r.ID, err))
	}
	return nil
}

func (t *writeTx) DeleteSubscription(ctx context.Context, id string) error {
	if _, err := t.q.exec(ctx, `DELETE FROM subscriptions WHERE id = ?`, id); err != nil {
		return classify(fmt.Errorf("delete subscription %q: %w", id, err))
	}
	return nil
}

func (t *writeTx) PutSigningKey(ctx context.Context, k driver.SigningKey) error {
	_, err := t.q.exec(ctx, `INSERT INTO signing_keys(kid, created_ms, seed, retired_ms) VALUES (?, ?, ?, ?)
		ON CONFLICT(kid) DO UPDATE SET retired_ms = excluded.retired_ms`, k.KID, k.CreatedMs, k.Seed, k.RetiredMs)
	if err != nil {
		return classify(fmt.Errorf("store signing key %q: %w", k.KID, err))
	}
	return nil
}
