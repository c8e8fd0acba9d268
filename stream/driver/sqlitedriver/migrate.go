package sqlitedriver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Schema versions.
//
//   - 1: the first layout: one row per message in a WITHOUT ROWID entries table keyed by
//     (stream_id, offset), with the stream's tail updated in streams.tail on every append. Files of
//     this version carry no schema_migrations table.
//   - 2: one row per record in the rowid table records (bodies out of the index b-tree), keys in
//     record_keys, streams.tail holding only the base tail (the durable tail is the largest
//     records.end_pos), leases for fenced checkpoint writes, and schema_migrations.
//   - 3: streams.hidden_from, the visibility mark of a record written over several transactions
//     (NULL: every record is visible; see [writeTx.HideFrom]).
//   - 4: streams.paused, a paused stream's reason (NULL: not paused).
//   - 5: subscriptions and signing_keys (the protocol's subscriptions, docs/server.md#subscriptions).
//   - 6: processor_states and processor_audit (the host's failure and pause state and the
//     operators' audit, docs/operations.md).
//   - 7: processor_parked (the events an operator's skip set aside, docs/operations.md#skip).
//
// Migrate moves an older file to SchemaVersion in one transaction (all or nothing), and refuses a
// file whose recorded version is newer than SchemaVersion.
const SchemaVersion = 7

// RecordSliceBytes is the body size at which the migration slices a long JSON record into
// several rows (the store does the same for new appends).
const RecordSliceBytes = 256 << 10

var schemaV2 = []string{
	`CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY,
		applied_ms INTEGER NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS streams (
		-- AUTOINCREMENT: a deleted stream's id is never handed to a later stream, so no cache keyed by
		-- id can alias two streams
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		path TEXT NOT NULL UNIQUE,
		content_type TEXT NOT NULL,
		-- 0 live, 1 soft-deleted (kept for its forks; the path stays reserved)
		state INTEGER NOT NULL DEFAULT 0,
		created_ms INTEGER NOT NULL,
		ttl_seconds INTEGER,
		expires_at_ms INTEGER,
		last_access_ms INTEGER NOT NULL,
		closed INTEGER NOT NULL DEFAULT 0,
		closed_by_producer TEXT,
		closed_by_epoch INTEGER,
		closed_by_seq INTEGER,
		-- forks: positions of forked_from up to fork_offset are inherited
		forked_from INTEGER REFERENCES streams(id),
		fork_offset INTEGER NOT NULL DEFAULT 0,
		fork_sub_offset INTEGER NOT NULL DEFAULT 0,
		-- the base tail (a fork's start); the durable tail is max(tail, max(records.end_pos))
		tail INTEGER NOT NULL DEFAULT 0,
		stream_seq TEXT,
		incarnation INTEGER NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX IF NOT EXISTS streams_forked_from ON streams(forked_from) WHERE forked_from IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS records (
		-- rowid: appends fill the rightmost leaf, and bodies (up to megabytes) never sit in an index
		id INTEGER PRIMARY KEY,
		stream_id INTEGER NOT NULL,
		record_start INTEGER NOT NULL,
		start_pos INTEGER NOT NULL,
		end_pos INTEGER NOT NULL,
		created_ms INTEGER NOT NULL,
		frames BLOB,
		body BLOB NOT NULL
	)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS records_by_end ON records(stream_id, end_pos)`,
	`CREATE TABLE IF NOT EXISTS record_keys (
		stream_id INTEGER NOT NULL,
		key TEXT NOT NULL,
		offset INTEGER NOT NULL,
		PRIMARY KEY (stream_id, key)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS producers (
		stream_id INTEGER NOT NULL,
		producer_id TEXT NOT NULL,
		epoch INTEGER NOT NULL,
		last_seq INTEGER NOT NULL,
		updated_ms INTEGER NOT NULL,
		PRIMARY KEY (stream_id, producer_id)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS claims (
		path TEXT NOT NULL,
		slug TEXT NOT NULL,
		at_ms INTEGER NOT NULL,
		failures INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (path, slug)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS claims_due ON claims(at_ms)`,
	`CREATE TABLE IF NOT EXISTS reduce_checkpoints (
		scope TEXT NOT NULL DEFAULT '',
		slug TEXT NOT NULL,
		reducer_version TEXT NOT NULL,
		reduced_through_offset INTEGER NOT NULL,
		state TEXT,
		PRIMARY KEY (scope, slug)
	)`,
	`CREATE TABLE IF NOT EXISTS leases (
		key TEXT PRIMARY KEY,
		holder TEXT NOT NULL,
		generation INTEGER NOT NULL,
		expires_ms INTEGER NOT NULL
	)`,
}

// Migrate creates the schema, or migrates a version-1 file to version 2, inside one IMMEDIATE
// transaction (SQLite's write lock keeps a second process from migrating at the same time).
func (d *Driver) Migrate(ctx context.Context) error {
	conn, err := d.wdb.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := migrate(ctx, conn); err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

func hasTable(ctx context.Context, conn *sql.Conn, name string) (bool, error) {
	var n int
	err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	return n > 0, err
}

func migrate(ctx context.Context, conn *sql.Conn) error {
	hasMigrations, err := hasTable(ctx, conn, "schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	version := 0
	if hasMigrations {
		var v sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
			return fmt.Errorf("migrate: read schema version: %w", err)
		}
		version = int(v.Int64)
	} else {
		hasEntries, err := hasTable(ctx, conn, "entries")
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		hasStreams, err := hasTable(ctx, conn, "streams")
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		switch {
		case hasEntries && hasStreams:
			version = 1
		case hasStreams:
			return foldtype.NewError(foldtype.CodeStoreSchema, nil,
				"the database has a streams table but no schema version this foldstream knows; it was not written by foldstream's stream store — open another file")
		}
	}
	if version > SchemaVersion {
		return foldtype.NewError(foldtype.CodeStoreSchema, map[string]any{"version": version, "supported": SchemaVersion},
			"the database uses stream store schema version %d, newer than this foldstream supports (%d); run a newer foldstream (or restore a backup made before the upgrade)",
			version, SchemaVersion)
	}
	if version == SchemaVersion {
		return nil
	}
	for _, stmt := range schemaV2 {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: create schema: %w", err)
		}
	}
	if version == 1 {
		if err := migrateV1(ctx, conn); err != nil {
			return fmt.Errorf("migrate schema 1 to 2: %w", err)
		}
	}
	if version < 3 {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE streams ADD COLUMN hidden_from INTEGER`); err != nil {
			return fmt.Errorf("migrate schema 2 to 3: %w", err)
		}
	}
	if version < 4 {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE streams ADD COLUMN paused TEXT`); err != nil {
			return fmt.Errorf("migrate schema 3 to 4: %w", err)
		}
	}
	for _, stmt := range schemaV5 {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate schema 4 to 5: %w", err)
		}
	}
	for _, stmt := range processorOpsSchema {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate schema 5 to 6: %w", err)
		}
	}
	for _, stmt := range parkedEventsSchema {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate schema 6 to 7: %w", err)
		}
	}
	now := time.Now().UnixMilli()
	for v := max(version, 1); v <= SchemaVersion; v++ {
		if _, err := conn.ExecContext(ctx, `INSERT OR IGNORE INTO schema_migrations(version, applied_ms) VALUES (?, ?)`, v, now); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v, err)
		}
	}
	return nil
}

// migrateV1 rewrites the entries of a version-1 file as records: a byte stream's entry already is
// one record; a JSON stream's entries that share (stream, record_start) are one record, sliced at
// RecordSliceBytes. Keys move to record_keys; streams.tail (the durable tail then) stays as the
// base tail, so the durable tail reads the same.
func migrateV1(ctx context.Context, conn *sql.Conn) error {
	type streamInfo struct {
		id   int64
		json bool
	}
	rows, err := conn.QueryContext(ctx, `SELECT id, content_type FROM streams`)
	if err != nil {
		return err
	}
	var streams []streamInfo
	for rows.Next() {
		var si streamInfo
		var ct string
		if err := rows.Scan(&si.id, &ct); err != nil {
			rows.Close()
			return err
		}
		mt, _, _ := strings.Cut(ct, ";")
		si.json = strings.EqualFold(strings.TrimSpace(mt), "application/json")
		streams = append(streams, si)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	insert := func(r driver.Record) error {
		var frames any
		if r.Frames != nil {
			frames = r.Frames
		}
		_, err := conn.ExecContext(ctx, `INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, frames, body)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, r.StreamID, r.RecordStart, r.Start, r.End, r.CreatedMs, frames, r.Body)
		return err
	}
	for _, si := range streams {
		rows, err := conn.QueryContext(ctx, `SELECT offset, record_start, created_ms, idempotency_key, body FROM entries
			WHERE stream_id = ? ORDER BY offset`, si.id)
		if err != nil {
			return err
		}
		var cur *driver.Record
		var prev int64
		var keys []driver.Key
		flush := func() error {
			if cur == nil {
				return nil
			}
			err := insert(*cur)
			cur = nil
			return err
		}
		for rows.Next() {
			var off, start, created int64
			var key sql.NullString
			var body []byte
			if err := rows.Scan(&off, &start, &created, &key, &body); err != nil {
				rows.Close()
				return err
			}
			if key.Valid {
				keys = append(keys, driver.Key{Key: key.String, Offset: off})
			}
			if !si.json {
				if err := insert(driver.Record{StreamID: si.id, RecordStart: start, Start: start, End: off, CreatedMs: created, Body: body}); err != nil {
					rows.Close()
					return err
				}
				continue
			}
			if cur != nil && (cur.RecordStart != start || len(cur.Body)+len(body) > RecordSliceBytes) {
				if err := flush(); err != nil {
					rows.Close()
					return err
				}
			}
			if cur == nil {
				// A slice starts where the previous slice of its record ended, or at the record's
				// start (the first message may sit above it when ephemerals took offsets between).
				from := start
				if prev > start {
					from = prev
				}
				cur = &driver.Record{StreamID: si.id, RecordStart: start, Start: from, CreatedMs: created}
				prev = from
			} else {
				cur.Body = append(cur.Body, ',')
			}
			cur.Frames = driver.AppendFrame(cur.Frames, off-prev, len(body))
			cur.Body = append(cur.Body, body...)
			cur.End = off
			prev = off
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := conn.ExecContext(ctx, `INSERT OR IGNORE INTO record_keys(stream_id, key, offset) VALUES (?, ?, ?)`,
				si.id, k.Key, k.Offset); err != nil {
				return err
			}
		}
	}
	if _, err := conn.ExecContext(ctx, `DROP TABLE entries`); err != nil {
		return err
	}
	return nil
}
