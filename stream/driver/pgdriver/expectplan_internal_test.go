package pgdriver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The checks of ExpectStream probe the records primary key whatever the statistics say. Prepared,
// the checks run with a generic plan once PostgreSQL prefers one, costed from the statistics of
// the last ANALYZE. Here those say that every record belongs to one stream (the first stream wrote
// 300 records and recorded a highest offset before the analyze; 2,000 streams of one record and
// one highest offset each came after it, as when a node creates streams faster than autovacuum
// analyzes): a probe written as EXISTS then looks cheapest
// as a sequential scan that stops at the first match, and reads the whole records table for a
// stream with nothing past its tail, at every group. A probe that takes the first record in key
// order can only be answered from the key.
func TestStreamChecksProbeTheRecordsKeyWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := openInternal(t)
	conn, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	run := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// No autovacuum on these tables: the statistics stay those of the ANALYZE below.
	run(`ALTER TABLE records SET (autovacuum_enabled = false)`)
	run(`ALTER TABLE streams SET (autovacuum_enabled = false)`)
	run(`ALTER TABLE stream_heads SET (autovacuum_enabled = false)`)
	run(`INSERT INTO streams(path, content_type, created_ms, last_access_ms) VALUES ('/first', 'application/json', 0, 0)`)
	run(`INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, body)
		SELECT s.id, g-1, g-1, g, 0, '\x7b7d' FROM streams s, generate_series(1, 300) g WHERE s.path = '/first'`)
	run(`INSERT INTO stream_heads(stream_id, highest) SELECT id, 300 FROM streams WHERE path = '/first'`)
	run(`ANALYZE records`)
	run(`ANALYZE streams`)
	run(`ANALYZE stream_heads`)
	run(`INSERT INTO streams(path, content_type, created_ms, last_access_ms)
		SELECT '/s' || g, 'application/json', 0, 0 FROM generate_series(1, 2000) g`)
	run(`INSERT INTO records(stream_id, record_start, start_pos, end_pos, created_ms, body)
		SELECT s.id, 0, 0, 1, 0, '\x7b7d' FROM streams s WHERE s.path LIKE '/s%'`)
	run(`INSERT INTO stream_heads(stream_id, highest) SELECT id, 1 FROM streams WHERE path LIKE '/s%'`)
	var id int64
	if err := conn.QueryRow(ctx, `SELECT id FROM streams WHERE path = '/s1000'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	run(`SET plan_cache_mode = force_generic_plan`)

	plans := map[string]struct {
		prepare, execute string
	}{
		"the checks of a group (expectRowsQuery)": {
			`PREPARE group_check(bigint[], text[], int8[], int8[], int8[], bool[], text[], int8[], int8[], int8[],
				int8[], int8[], int8[], text[], int8[], text[], int8[], int8[]) AS ` + expectRowsQuery,
			`EXPLAIN EXECUTE group_check(ARRAY[%d]::bigint[], '{application/json}', '{0}', '{NULL}', '{NULL}', '{f}',
				'{NULL}', '{NULL}', '{NULL}', '{NULL}', '{0}', '{0}', '{0}', '{NULL}', '{0}', '{NULL}', '{1}', '{1}')`,
		},
		"the check sent in place (expectStreamQuery)": {
			`PREPARE one_check(bigint, text, int, int8, int8, bool, text, int8, int8, int8, int8, int8, int8, text,
				int8, text, int8, int8) AS ` + expectStreamQuery,
			`EXPLAIN EXECUTE one_check(%d, 'application/json', 0, NULL, NULL, false, NULL, NULL, NULL, NULL, 0, 0, 0,
				NULL, 0, NULL, 1, 1)`,
		},
	}
	for name, p := range plans {
		run(p.prepare)
		rows, err := conn.Query(ctx, fmt.Sprintf(p.execute, id)) // EXPLAIN takes no parameters
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"records", "streams", "stream_heads"} {
			if strings.Contains(plan.String(), "Seq Scan on "+table) {
				t.Errorf("%s: a generic plan scans the whole %s table:\n%s", name, table, plan.String())
			}
		}
	}
}
