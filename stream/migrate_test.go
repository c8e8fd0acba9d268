package stream

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// schemaV1 is the DDL of the store's first layout (one row per message in entries), exactly as the
// code before schema version 2 created it.
var schemaV1 = []string{
	`CREATE TABLE IF NOT EXISTS streams (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		path TEXT NOT NULL UNIQUE,
		content_type TEXT NOT NULL,
		state INTEGER NOT NULL DEFAULT 0,
		created_ms INTEGER NOT NULL,
		ttl_seconds INTEGER,
		expires_at_ms INTEGER,
		last_access_ms INTEGER NOT NULL,
		closed INTEGER NOT NULL DEFAULT 0,
		closed_by_producer TEXT,
		closed_by_epoch INTEGER,
		closed_by_seq INTEGER,
		forked_from INTEGER REFERENCES streams(id),
		fork_offset INTEGER NOT NULL DEFAULT 0,
		fork_sub_offset INTEGER NOT NULL DEFAULT 0,
		tail INTEGER NOT NULL DEFAULT 0,
		stream_seq TEXT,
		incarnation INTEGER NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX IF NOT EXISTS streams_forked_from ON streams(forked_from) WHERE forked_from IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS entries (
		stream_id INTEGER NOT NULL,
		offset INTEGER NOT NULL,
		record_start INTEGER NOT NULL,
		created_ms INTEGER NOT NULL,
		idempotency_key TEXT,
		body BLOB NOT NULL,
		PRIMARY KEY (stream_id, offset)
	) WITHOUT ROWID`,
	`CREATE UNIQUE INDEX IF NOT EXISTS entries_idempotency ON entries(stream_id, idempotency_key) WHERE idempotency_key IS NOT NULL`,
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
}

// writeV1File builds a schema-1 file holding what the first layout's code wrote: an event stream
// (a wake batch, a keyed event, a batch that ended with an ephemeral), a protocol JSON stream with
// a three-message POST and a producer, a byte stream of two records, a fork of it that split a
// record, a claim and a checkpoint.
func writeV1File(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts := append([]string(nil), schemaV1...)
	stmts = append(stmts,
		`INSERT INTO streams(id, path, content_type, created_ms, last_access_ms, tail, incarnation) VALUES
			(1, '/ev', 'application/json', 1000, 1000, 5, 1),
			(2, '/json', 'application/json', 1000, 1000, 4, 0),
			(3, '/bytes', 'text/plain', 1000, 1000, 11, 0)`,
		`INSERT INTO streams(id, path, content_type, created_ms, last_access_ms, tail, forked_from, fork_offset, fork_sub_offset) VALUES
			(4, '/fork', 'text/plain', 1000, 1000, 8, 3, 6, 2)`,
		`INSERT INTO entries(stream_id, offset, record_start, created_ms, idempotency_key, body) VALUES
			(1, 1, 0, 1000, NULL, '{"type":"events.iterate.com/itx/created","payload":{"path":"/ev"},"createdAt":"1970-01-01T00:00:01.000Z"}'),
			(1, 2, 0, 1000, NULL, '{"type":"events.iterate.com/itx/woken","payload":{"incarnation":1,"reason":"request"},"createdAt":"1970-01-01T00:00:01.000Z"}'),
			(1, 3, 2, 1000, 'k1', '{"type":"paid","payload":{"n":1},"idempotencyKey":"k1","createdAt":"1970-01-01T00:00:01.000Z"}'),
			(1, 4, 3, 1000, NULL, '{"type":"d","createdAt":"1970-01-01T00:00:01.000Z"}'),
			(2, 1, 0, 1000, NULL, '{"n":1}'),
			(2, 2, 1, 1000, NULL, '{"n":2}'),
			(2, 3, 1, 1000, NULL, '[3]'),
			(2, 4, 1, 1000, NULL, '"four"'),
			(3, 6, 0, 1000, NULL, 'hello '),
			(3, 11, 6, 1000, NULL, 'world'),
			(4, 8, 6, 1000, NULL, 'wo')`,
		`INSERT INTO producers(stream_id, producer_id, epoch, last_seq, updated_ms) VALUES (2, 'p', 0, 1, 1000)`,
		`INSERT INTO claims(path, slug, at_ms, failures) VALUES ('/ev', 'proc', 5000, 0)`,
		`INSERT INTO reduce_checkpoints(scope, slug, reducer_version, reduced_through_offset, state) VALUES ('/ev', 'proc', '1', 3, '{"n":1}')`,
	)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// A file written by the first layout opens, is migrated to one row per record, and reads,
// dedupes, resumes offsets and producer sequences exactly as before.
func TestSchemaV1FileIsMigratedOnOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v1.db")
	writeV1File(t, path)
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()

	var version int
	if err := s.rawQueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil || version != sqlitedriver.SchemaVersion {
		t.Fatalf("schema version: got %d (%v), want %d", version, err, sqlitedriver.SchemaVersion)
	}
	if n := countRows(t, s, `SELECT count(*) FROM sqlite_master WHERE name = 'entries'`); n != 0 {
		t.Fatal("the entries table is still there")
	}

	// The event stream: events, durable mark above the last row (a trailing ephemeral), key.
	p := mustRead(t, s, "/ev", 0, 0, readOptions{})
	if got := offsets(p.Events); !slices.Equal(got, []int64{1, 2, 3, 4}) || !p.AtHead || p.ScannedThroughOffset != 5 {
		t.Fatalf("event read: offsets %v atHead %v scanned %d", got, p.AtHead, p.ScannedThroughOffset)
	}
	again := mustAppend(t, s, "/ev", foldtype.EventInput{Type: "paid", Payload: []byte(`{"n":1}`), IdempotencyKey: "k1"})
	if again[0].Offset != 3 {
		t.Fatalf("idempotent retry after migration: got offset %d, want 3", again[0].Offset)
	}
	if _, err := s.Events().Stream("/ev").Append(ctx, foldtype.EventInput{Type: "paid", Payload: []byte(`{"n":2}`), IdempotencyKey: "k1"}); !errors.Is(err, foldtype.ErrIdempotencyConflict) {
		t.Fatalf("conflicting retry: got %v, want IDEMPOTENCY_CONFLICT", err)
	}
	if next := mustAppend(t, s, "/ev", ev("e")); next[0].Offset != 6 {
		t.Fatalf("next offset: got %d, want 6", next[0].Offset)
	}

	// The protocol JSON stream: messages, record boundaries, producer state.
	if got, want := readAll(t, s, "/json"), `[{"n":1},{"n":2},[3],"four"]`; got != want {
		t.Fatalf("json read: got %s, want %s", got, want)
	}
	r, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/json", After: 2})
	if err != nil || string(r.Body) != `[[3],"four"]` || r.Next != 4 {
		t.Fatalf("json read after 2: got %s next %d (%v)", r.Body, r.Next, err)
	}
	dup, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/json", ContentType: "application/json", Body: []byte(`{"n":9}`),
		Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 1}})
	if err != nil || !dup.Duplicate {
		t.Fatalf("producer retry: got %+v (%v), want a duplicate", dup, err)
	}
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/json-fork", ContentType: "application/json",
		ForkedFrom: "/json", ForkOffset: 1, HasForkOffset: true, ForkSubOffset: 2}); err != nil {
		t.Fatalf("fork into a migrated record: %v", err)
	}
	if got, want := readAll(t, s, "/json-fork"), `[{"n":1},{"n":2},[3]]`; got != want {
		t.Fatalf("fork read: got %s, want %s", got, want)
	}

	// The byte stream and its split fork.
	if got := readAll(t, s, "/bytes"); got != "hello world" {
		t.Fatalf("bytes read: got %q", got)
	}
	if got := readAll(t, s, "/fork"); got != "hello wo" {
		t.Fatalf("fork read: got %q", got)
	}
	a := mustAppendRecord(t, s, AppendRequest{Path: "/bytes", ContentType: "text/plain", Body: []byte("!")})
	if a.Tail != 12 {
		t.Fatalf("byte tail after append: got %d, want 12", a.Tail)
	}

	// Claims and checkpoints stay.
	if cl, err := s.Events().Claims(ctx); err != nil || len(cl) != 1 || cl[0].Slug != "proc" {
		t.Fatalf("claims: got %+v (%v)", cl, err)
	}
	cps, err := s.Events().Checkpoints(ctx, "/ev")
	if err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := cps.ReadCheckpoint(ctx, "proc"); err != nil || !ok || cp.ReducedThroughOffset != 3 || string(cp.State) != `{"n":1}` {
		t.Fatalf("checkpoint: got %+v %v (%v)", cp, ok, err)
	}

	// Opening again finds the current version and changes nothing.
	s.Close(context.Background())
	s2, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	if got, want := readAll(t, s2, "/json"), `[{"n":1},{"n":2},[3],"four"]`; got != want {
		t.Fatalf("json read after reopen: got %s, want %s", got, want)
	}
}

// A file from a newer schema, or one that is not a stream store, is refused with STORE_SCHEMA,
// never misread.
func TestUnknownSchemaIsRefused(t *testing.T) {
	t.Parallel()
	for name, stmts := range map[string][]string{
		"newer":   {`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)`, `INSERT INTO schema_migrations VALUES (99, 0)`},
		"foreign": {`CREATE TABLE streams (id INTEGER PRIMARY KEY, name TEXT)`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range stmts {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			s, err := openStore(path, Config{Logger: quietLog})
			if err == nil {
				s.Close(context.Background())
				t.Fatal("open: got nil error, want STORE_SCHEMA")
			}
			if !errors.Is(err, foldtype.ErrStoreSchema) {
				t.Fatalf("open: got %v, want STORE_SCHEMA", err)
			}
		})
	}
}
