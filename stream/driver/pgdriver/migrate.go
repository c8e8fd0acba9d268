package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/jackc/pgx/v5"
)

// migration is one versioned schema change, applied in its own transaction and recorded in
// foldstream_migrations.
type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations are applied in order; never edit one that shipped, append a new one. Text keys use
// the "C" collation so ordering (claims by path, then slug) is byte-wise, as on SQLite.
var migrations = []migration{
	{version: 1, name: "streams, records, keys, producers, claims, checkpoints, leases", stmts: []string{
		`CREATE TABLE streams (
			-- an identity never hands a deleted (or rolled-back) stream's id to a later stream
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			path text COLLATE "C" NOT NULL UNIQUE,
			content_type text NOT NULL,
			state int NOT NULL DEFAULT 0,
			created_ms bigint NOT NULL,
			ttl_seconds bigint,
			expires_at_ms bigint,
			last_access_ms bigint NOT NULL,
			closed boolean NOT NULL DEFAULT false,
			closed_by_producer text,
			closed_by_epoch bigint,
			closed_by_seq bigint,
			forked_from bigint REFERENCES streams(id),
			fork_offset bigint NOT NULL DEFAULT 0,
			fork_sub_offset bigint NOT NULL DEFAULT 0,
			-- the tail the stream starts from (a fork's fork point); the durable tail is the larger
			-- of this and the largest end_pos of its records
			tail bigint NOT NULL DEFAULT 0,
			stream_seq text COLLATE "C",
			incarnation bigint NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX streams_forked_from ON streams(forked_from) WHERE forked_from IS NOT NULL`,
		// One row per appended record (or slice of a large one): positions (start_pos, end_pos].
		// Large bodies are TOASTed out of line, so they never slow the index.
		`CREATE TABLE records (
			stream_id bigint NOT NULL,
			end_pos bigint NOT NULL,
			start_pos bigint NOT NULL,
			record_start bigint NOT NULL,
			created_ms bigint NOT NULL,
			frames bytea,
			body bytea NOT NULL,
			PRIMARY KEY (stream_id, end_pos)
		)`,
		`CREATE TABLE record_keys (
			stream_id bigint NOT NULL,
			key text COLLATE "C" NOT NULL,
			"offset" bigint NOT NULL,
			PRIMARY KEY (stream_id, key)
		)`,
		`CREATE TABLE producers (
			stream_id bigint NOT NULL,
			producer_id text COLLATE "C" NOT NULL,
			epoch bigint NOT NULL,
			last_seq bigint NOT NULL,
			updated_ms bigint NOT NULL,
			PRIMARY KEY (stream_id, producer_id)
		)`,
		`CREATE TABLE claims (
			path text COLLATE "C" NOT NULL,
			slug text COLLATE "C" NOT NULL,
			at_ms bigint NOT NULL,
			failures int NOT NULL DEFAULT 0,
			PRIMARY KEY (path, slug)
		)`,
		`CREATE INDEX claims_due ON claims(at_ms)`,
		`CREATE TABLE reduce_checkpoints (
			scope text COLLATE "C" NOT NULL DEFAULT '',
			slug text COLLATE "C" NOT NULL,
			reducer_version text NOT NULL,
			reduced_through_offset bigint NOT NULL,
			state text,
			PRIMARY KEY (scope, slug)
		)`,
		// A lease: who runs a processor (holder), under which generation (the fence every
		// checkpoint write checks), until when (the database's clock), and where to ask it
		// (holder_addr, for routing reads to the owner).
		`CREATE TABLE leases (
			key text COLLATE "C" PRIMARY KEY,
			holder text NOT NULL,
			holder_addr text NOT NULL DEFAULT '',
			generation bigint NOT NULL,
			expires_at timestamptz NOT NULL
		)`,
		// Ephemeral events too large for a NOTIFY payload travel through this table: unlogged
		// (never fsynced, emptied by a crash — ephemerals are never durable), read by id by the
		// other nodes, and deleted after a short retention.
		`CREATE UNLOGGED TABLE ephemeral_payloads (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
			payload bytea NOT NULL
		)`,
		// The highest offset handed out per stream, ephemerals included: ephemerals take offsets
		// from the same sequence as durable events on every node. Unlogged (no WAL flush per
		// ephemeral batch): stream_reserves (migration 8) bounds it durably.
		`CREATE UNLOGGED TABLE stream_heads (
			stream_id bigint PRIMARY KEY,
			highest bigint NOT NULL
		)`,
	}},
	// A paused stream's reason (NULL: not paused), set by the pause and resume control events.
	{version: 2, name: "streams.paused", stmts: []string{
		`ALTER TABLE streams ADD COLUMN paused text`,
	}},
	{version: 3, name: "subscriptions and webhook signing keys", stmts: []string{
		`CREATE TABLE subscriptions (
			id text COLLATE "C" PRIMARY KEY,
			config text NOT NULL,
			state text NOT NULL
		)`,
		`CREATE TABLE signing_keys (
			kid text COLLATE "C" PRIMARY KEY,
			created_ms bigint NOT NULL,
			seed bytea NOT NULL,
			retired_ms bigint NOT NULL DEFAULT 0
		)`,
	}},
	// What a lease's holder reports of its work (driver.Lease.Status; the host's processor
	// state), stored with each renewal so every node can show it.
	{version: 4, name: "leases.status", stmts: []string{
		`ALTER TABLE leases ADD COLUMN status text NOT NULL DEFAULT ''`,
	}},
	// The check of a write sent with its commit (driver.StreamExpecter,
	// docs/postgres.md#writes-round-trips): it fails the statement, and so the rest of the round
	// trip, when ok is not true.
	{version: 5, name: "foldstream_expect_stream", stmts: []string{
		`CREATE FUNCTION foldstream_expect_stream(ok boolean, stream_id bigint) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
			IF ok IS NOT TRUE THEN
				RAISE EXCEPTION 'foldstream: stream % changed since this node last wrote it', stream_id
					USING ERRCODE = 'FS001', DETAIL = stream_id::text;
			END IF;
		END $$`,
	}},
	// A processor's failure and pause state and the operators' audit (docs/operations.md),
	// readable from every node also when the one that ran the processor is dead.
	{version: 6, name: "processor states and audit", stmts: processorOpsSchema},
	// The events an operator's skip set aside with their failure (docs/operations.md#skip).
	{version: 7, name: "parked events", stmts: parkedEventsSchema},
	// Offsets reserved per stream for ephemerals, logged (docs/postgres.md#ephemeral-events):
	// stream_heads is unlogged, so a database crash empties it and a standby never has it, and
	// the nodes, which outlive both, hold the offsets ephemerals took. The reserve is never below
	// any offset handed out, so the sequence restarts after it, never below.
	{version: 8, name: "stream_reserves", stmts: []string{
		`CREATE TABLE stream_reserves (
			stream_id bigint PRIMARY KEY,
			reserved bigint NOT NULL
		)`,
	}},
	// A fenced write reads its lease row FOR KEY SHARE (docs/postgres.md#processors-and-leases): a renewal,
	// which changes only the expiry and status, then takes the row at once, while a takeover,
	// which changes the generation, waits for the write. PostgreSQL counts a column as part of a
	// key, and an update of it as conflicting with KEY SHARE, when a unique index holds it.
	{version: 9, name: "leases_key_generation", stmts: []string{
		`CREATE UNIQUE INDEX leases_key_generation ON leases (key, generation)`,
	}},
}

// lockKey derives a 32-bit advisory-lock class from the schema and a purpose, so stores in
// different schemas of one database never contend for each other's locks.
func lockKey(schema, purpose string) int32 {
	h := fnv.New32a()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write([]byte(purpose))
	return int32(h.Sum32())
}

// Migrate creates the schema or brings it to the latest version. Several nodes may call it at
// once: it holds a session advisory lock for the whole run, so one applies each migration and the
// others then find it recorded. A database recording a version newer than this build knows is
// refused, never misread.
func (d *Driver) Migrate(ctx context.Context) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return d.classify(fmt.Errorf("migrate: %w", err))
	}
	defer conn.Release()
	key := lockKey(d.schema, "migrate")
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, 0)`, key); err != nil {
		return d.classify(fmt.Errorf("migrate: take the migration lock: %w", err))
	}
	defer func() {
		// A failed unlock (connection gone) releases the lock anyway: it is session-scoped.
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1, 0)`, key)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS foldstream_migrations (
		version int PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return d.classify(fmt.Errorf("migrate: %w", err))
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM foldstream_migrations`).Scan(&current); err != nil {
		return d.classify(fmt.Errorf("migrate: read the schema version: %w", err))
	}
	latest := migrations[len(migrations)-1].version
	if current > latest {
		return foldtype.NewError(foldtype.CodeStoreSchema, map[string]any{"version": current, "supported": latest},
			"the database's foldstream schema is version %d, newer than this build's %d: upgrade foldstream, or point it at another database or schema", current, latest)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, stmt := range m.stmts {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO foldstream_migrations(version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return d.classify(fmt.Errorf("migrate: apply version %d (%s): %w", m.version, m.name, err))
		}
		d.log.Info("postgres: applied schema migration", "version", m.version, "name", m.name)
	}
	return nil
}

var errNoRows = pgx.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
