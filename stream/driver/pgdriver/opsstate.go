package pgdriver

import (
	"context"
	"fmt"
	"strings"

	"github.com/foldstream/foldstream/stream/driver"
)

// Processor state rows and the operators' audit (docs/operations.md): schema version 6.

var (
	_ driver.ProcessorOpsReader = (*readTx)(nil)
	_ driver.ProcessorOpsTx     = (*writeTx)(nil)
)

// processorOpsSchema is migration 6's statements.
var processorOpsSchema = []string{
	`CREATE TABLE processor_states (
		path text COLLATE "C" NOT NULL,
		slug text COLLATE "C" NOT NULL,
		state text NOT NULL,
		reason text NOT NULL DEFAULT '',
		code text NOT NULL DEFAULT '',
		message text NOT NULL DEFAULT '',
		event_offset bigint NOT NULL DEFAULT 0,
		event_type text NOT NULL DEFAULT '',
		attempts integer NOT NULL DEFAULT 0,
		node text NOT NULL DEFAULT '',
		by_whom text NOT NULL DEFAULT '',
		since_ms bigint NOT NULL,
		PRIMARY KEY (path, slug)
	)`,
	`CREATE TABLE processor_audit (
		id bigserial PRIMARY KEY,
		at_ms bigint NOT NULL,
		actor text NOT NULL,
		op text NOT NULL,
		path text COLLATE "C" NOT NULL,
		slug text NOT NULL,
		reason text NOT NULL,
		outcome text NOT NULL,
		node text NOT NULL
	)`,
	`CREATE INDEX processor_audit_by_path ON processor_audit (path, slug, id)`,
}

const processorStateCols = `path, slug, state, reason, code, message, event_offset, event_type, attempts, node, by_whom, since_ms`

func (t *readTx) ProcessorStates(ctx context.Context, q driver.ProcessorStateQuery) ([]driver.ProcessorStateRow, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Path != "" {
		add("path = $%d", q.Path)
	}
	if q.Paths != nil {
		if len(q.Paths) == 0 {
			return nil, nil
		}
		add("path = ANY($%d::text[])", q.Paths)
	}
	if q.Prefix != "" {
		add("starts_with(path, $%d)", q.Prefix)
	}
	if q.Slug != "" {
		add("slug = $%d", q.Slug)
	}
	if q.State != "" {
		add("state = $%d", q.State)
	}
	query := `SELECT ` + processorStateCols + ` FROM processor_states`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := t.tx.Query(ctx, query+" ORDER BY path, slug", args...)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("read processor states: %w", err))
	}
	defer rows.Close()
	var out []driver.ProcessorStateRow
	for rows.Next() {
		var r driver.ProcessorStateRow
		if err := rows.Scan(&r.Path, &r.Slug, &r.State, &r.Reason, &r.Code, &r.Message, &r.Offset, &r.EventType,
			&r.Attempts, &r.Node, &r.By, &r.SinceMs); err != nil {
			return nil, t.d.classify(fmt.Errorf("read processor states: %w", err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("read processor states: %w", err))
	}
	return out, nil
}

func (t *readTx) AuditRecords(ctx context.Context, q driver.AuditQuery) ([]driver.AuditRecord, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := t.tx.Query(ctx, `SELECT id, at_ms, actor, op, path, slug, reason, outcome, node FROM processor_audit
		WHERE ($1 = '' OR path = $1) AND ($2 = '' OR slug = $2) ORDER BY id DESC LIMIT $3`, q.Path, q.Slug, limit)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("read the audit: %w", err))
	}
	defer rows.Close()
	var out []driver.AuditRecord
	for rows.Next() {
		var r driver.AuditRecord
		if err := rows.Scan(&r.ID, &r.AtMs, &r.Actor, &r.Op, &r.Path, &r.Slug, &r.Reason, &r.Outcome, &r.Node); err != nil {
			return nil, t.d.classify(fmt.Errorf("read the audit: %w", err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("read the audit: %w", err))
	}
	return out, nil
}

func (t *writeTx) PutProcessorState(ctx context.Context, r driver.ProcessorStateRow, fence *driver.Fence) error {
	if err := t.checkFence(ctx, fence, "store processor state"); err != nil {
		return err
	}
	return t.exec(ctx, "store processor state", `INSERT INTO processor_states(`+processorStateCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (path, slug) DO UPDATE SET state = excluded.state, reason = excluded.reason, code = excluded.code,
			message = excluded.message, event_offset = excluded.event_offset, event_type = excluded.event_type,
			attempts = excluded.attempts, node = excluded.node, by_whom = excluded.by_whom, since_ms = excluded.since_ms`,
		r.Path, r.Slug, r.State, r.Reason, r.Code, r.Message, r.Offset, r.EventType, r.Attempts, r.Node, r.By, r.SinceMs)
}

func (t *writeTx) DeleteProcessorStateRow(ctx context.Context, path, slug string, fence *driver.Fence) error {
	if err := t.checkFence(ctx, fence, "delete processor state"); err != nil {
		return err
	}
	return t.exec(ctx, "delete processor state", `DELETE FROM processor_states WHERE path = $1 AND slug = $2`, path, slug)
}

func (t *writeTx) InsertAuditRecord(ctx context.Context, r driver.AuditRecord) error {
	return t.exec(ctx, "append to the audit", `INSERT INTO processor_audit(at_ms, actor, op, path, slug, reason, outcome, node)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, r.AtMs, r.Actor, r.Op, r.Path, r.Slug, r.Reason, r.Outcome, r.Node)
}

// Parked events (docs/operations.md#skip): migration 7.

var (
	_ driver.ParkedEventsReader = (*readTx)(nil)
	_ driver.ParkedEventsTx     = (*writeTx)(nil)
)

// parkedEventsSchema is migration 7's statements.
var parkedEventsSchema = []string{
	`CREATE TABLE processor_parked (
		path text COLLATE "C" NOT NULL,
		slug text COLLATE "C" NOT NULL,
		event_offset bigint NOT NULL,
		event_type text NOT NULL DEFAULT '',
		code text NOT NULL DEFAULT '',
		message text NOT NULL DEFAULT '',
		attempts integer NOT NULL DEFAULT 0,
		node text NOT NULL DEFAULT '',
		at_ms bigint NOT NULL,
		by_whom text NOT NULL DEFAULT '',
		reason text NOT NULL DEFAULT '',
		PRIMARY KEY (path, slug, event_offset)
	)`,
}

const parkedEventCols = `path, slug, event_offset, event_type, code, message, attempts, node, at_ms, by_whom, reason`

func (t *readTx) ParkedEvents(ctx context.Context, q driver.ParkedEventQuery) ([]driver.ParkedEventRow, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+parkedEventCols+` FROM processor_parked
		WHERE ($1 = '' OR path = $1) AND ($2 = '' OR slug = $2) AND ($3 = 0 OR event_offset = $3)
		ORDER BY path, slug, event_offset`, q.Path, q.Slug, q.Offset)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("read parked events: %w", err))
	}
	defer rows.Close()
	var out []driver.ParkedEventRow
	for rows.Next() {
		var r driver.ParkedEventRow
		if err := rows.Scan(&r.Path, &r.Slug, &r.Offset, &r.EventType, &r.Code, &r.Message, &r.Attempts, &r.Node,
			&r.AtMs, &r.By, &r.Reason); err != nil {
			return nil, t.d.classify(fmt.Errorf("read parked events: %w", err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("read parked events: %w", err))
	}
	return out, nil
}

func (t *readTx) ParkedEventCounts(ctx context.Context) (map[string]int, error) {
	rows, err := t.tx.Query(ctx, `SELECT slug, count(*) FROM processor_parked GROUP BY slug`)
	if err != nil {
		return nil, t.d.classify(fmt.Errorf("count parked events: %w", err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var slug string
		var n int64
		if err := rows.Scan(&slug, &n); err != nil {
			return nil, t.d.classify(fmt.Errorf("count parked events: %w", err))
		}
		out[slug] = int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, t.d.classify(fmt.Errorf("count parked events: %w", err))
	}
	return out, nil
}

func (t *writeTx) PutParkedEvent(ctx context.Context, r driver.ParkedEventRow, fence *driver.Fence) error {
	if err := t.checkFence(ctx, fence, "park an event"); err != nil {
		return err
	}
	return t.exec(ctx, "park an event", `INSERT INTO processor_parked(`+parkedEventCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (path, slug, event_offset) DO UPDATE SET event_type = excluded.event_type, code = excluded.code,
			message = excluded.message, attempts = excluded.attempts, node = excluded.node, at_ms = excluded.at_ms,
			by_whom = excluded.by_whom, reason = excluded.reason`,
		r.Path, r.Slug, r.Offset, r.EventType, r.Code, r.Message, r.Attempts, r.Node, r.AtMs, r.By, r.Reason)
}

func (t *writeTx) DeleteParkedEvent(ctx context.Context, path, slug string, offset int64, fence *driver.Fence) (bool, error) {
	if err := t.checkFence(ctx, fence, "remove a parked event"); err != nil {
		return false, err
	}
	// A query, not an Exec: the pipeline answers a queued Exec before it runs, without its count.
	t.wroteInSp = true
	var n int64
	err := t.tx.QueryRow(ctx, `WITH gone AS (DELETE FROM processor_parked WHERE path = $1 AND slug = $2 AND event_offset = $3 RETURNING 1)
		SELECT count(*) FROM gone`, path, slug, offset).Scan(&n)
	if err != nil {
		return false, t.d.classify(fmt.Errorf("remove a parked event: %w", err))
	}
	return n > 0, nil
}
