package sqlitedriver

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

// processorOpsSchema creates the tables of schema version 6.
var processorOpsSchema = []string{
	`CREATE TABLE IF NOT EXISTS processor_states (
		path TEXT NOT NULL,
		slug TEXT NOT NULL,
		state TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		code TEXT NOT NULL DEFAULT '',
		message TEXT NOT NULL DEFAULT '',
		event_offset INTEGER NOT NULL DEFAULT 0,
		event_type TEXT NOT NULL DEFAULT '',
		attempts INTEGER NOT NULL DEFAULT 0,
		node TEXT NOT NULL DEFAULT '',
		by_whom TEXT NOT NULL DEFAULT '',
		since_ms INTEGER NOT NULL,
		PRIMARY KEY (path, slug)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS processor_audit (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		at_ms INTEGER NOT NULL,
		actor TEXT NOT NULL,
		op TEXT NOT NULL,
		path TEXT NOT NULL,
		slug TEXT NOT NULL,
		reason TEXT NOT NULL,
		outcome TEXT NOT NULL,
		node TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS processor_audit_by_path ON processor_audit(path, slug, id)`,
}

const processorStateCols = `path, slug, state, reason, code, message, event_offset, event_type, attempts, node, by_whom, since_ms`

func (t *readTx) ProcessorStates(ctx context.Context, q driver.ProcessorStateQuery) ([]driver.ProcessorStateRow, error) {
	var where []string
	var args []any
	if q.Path != "" {
		where, args = append(where, "path = ?"), append(args, q.Path)
	}
	if q.Paths != nil {
		if len(q.Paths) == 0 {
			return nil, nil
		}
		list, err := jsonList(q.Paths)
		if err != nil {
			return nil, fmt.Errorf("read processor states: %w", err)
		}
		where, args = append(where, "path IN (SELECT value FROM json_each(?))"), append(args, list)
	}
	if q.Prefix != "" {
		where, args = append(where, "substr(path, 1, ?) = ?"), append(args, len(q.Prefix), q.Prefix)
	}
	if q.Slug != "" {
		where, args = append(where, "slug = ?"), append(args, q.Slug)
	}
	if q.State != "" {
		where, args = append(where, "state = ?"), append(args, q.State)
	}
	query := `SELECT ` + processorStateCols + ` FROM processor_states`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := t.q.query(ctx, query+" ORDER BY path, slug", args...)
	if err != nil {
		return nil, fmt.Errorf("read processor states: %w", err)
	}
	defer rows.Close()
	var out []driver.ProcessorStateRow
	for rows.Next() {
		var r driver.ProcessorStateRow
		if err := rows.Scan(&r.Path, &r.Slug, &r.State, &r.Reason, &r.Code, &r.Message, &r.Offset, &r.EventType,
			&r.Attempts, &r.Node, &r.By, &r.SinceMs); err != nil {
			return nil, fmt.Errorf("read processor states: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *readTx) AuditRecords(ctx context.Context, q driver.AuditQuery) ([]driver.AuditRecord, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := t.q.query(ctx, `SELECT id, at_ms, actor, op, path, slug, reason, outcome, node FROM processor_audit
		WHERE (?1 = '' OR path = ?1) AND (?2 = '' OR slug = ?2) ORDER BY id DESC LIMIT ?3`, q.Path, q.Slug, limit)
	if err != nil {
		return nil, fmt.Errorf("read the audit: %w", err)
	}
	defer rows.Close()
	var out []driver.AuditRecord
	for rows.Next() {
		var r driver.AuditRecord
		if err := rows.Scan(&r.ID, &r.AtMs, &r.Actor, &r.Op, &r.Path, &r.Slug, &r.Reason, &r.Outcome, &r.Node); err != nil {
			return nil, fmt.Errorf("read the audit: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *writeTx) PutProcessorState(ctx context.Context, r driver.ProcessorStateRow, fence *driver.Fence) error {
	if err := t.checkFence(fence, "store processor state"); err != nil {
		return err
	}
	_, err := t.q.exec(ctx, `INSERT INTO processor_states(`+processorStateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(path, slug) DO UPDATE SET state = excluded.state, reason = excluded.reason, code = excluded.code,
			message = excluded.message, event_offset = excluded.event_offset, event_type = excluded.event_type,
			attempts = excluded.attempts, node = excluded.node, by_whom = excluded.by_whom, since_ms = excluded.since_ms`,
		r.Path, r.Slug, r.State, r.Reason, r.Code, r.Message, r.Offset, r.EventType, r.Attempts, r.Node, r.By, r.SinceMs)
	if err != nil {
		return classify(fmt.Errorf("store processor state: %w", err))
	}
	return nil
}

func (t *writeTx) DeleteProcessorStateRow(ctx context.Context, path, slug string, fence *driver.Fence) error {
	if err := t.checkFence(fence, "delete processor state"); err != nil {
		return err
	}
	if _, err := t.q.exec(ctx, `DELETE FROM processor_states WHERE path = ? AND slug = ?`, path, slug); err != nil {
		return classify(fmt.Errorf("delete processor state: %w", err))
	}
	return nil
}

func (t *writeTx) InsertAuditRecord(ctx context.Context, r driver.AuditRecord) error {
	_, err := t.q.exec(ctx, `INSERT INTO processor_audit(at_ms, actor, op, path, slug, reason, outcome, node)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.AtMs, r.Actor, r.Op, r.Path, r.Slug, r.Reason, r.Outcome, r.Node)
	if err != nil {
		return classify(fmt.Errorf("append to the audit: %w", err))
	}
	return nil
}

// Parked events (docs/operations.md#skip): schema version 7.

var (
	_ driver.ParkedEventsReader = (*readTx)(nil)
	_ driver.ParkedEventsTx     = (*writeTx)(nil)
)

// parkedEventsSchema creates the table of schema version 7.
var parkedEventsSchema = []string{
	`CREATE TABLE IF NOT EXISTS processor_parked (
		path TEXT NOT NULL,
		slug TEXT NOT NULL,
		event_offset INTEGER NOT NULL,
		event_type TEXT NOT NULL DEFAULT '',
		code TEXT NOT NULL DEFAULT '',
		message TEXT NOT NULL DEFAULT '',
		attempts INTEGER NOT NULL DEFAULT 0,
		node TEXT NOT NULL DEFAULT '',
		at_ms INTEGER NOT NULL,
		by_whom TEXT NOT NULL DEFAULT '',
		reason TEXT NOT NULL DEFAULT '',
		PRIMARY KEY (path, slug, event_offset)
	) WITHOUT ROWID`,
}

const parkedEventCols = `path, slug, event_offset, event_type, code, message, attempts, node, at_ms, by_whom, reason`

func (t *readTx) ParkedEvents(ctx context.Context, q driver.ParkedEventQuery) ([]driver.ParkedEventRow, error) {
	rows, err := t.q.query(ctx, `SELECT `+parkedEventCols+` FROM processor_parked
		WHERE (?1 = '' OR path = ?1) AND (?2 = '' OR slug = ?2) AND (?3 = 0 OR event_offset = ?3)
		ORDER BY path, slug, event_offset`, q.Path, q.Slug, q.Offset)
	if err != nil {
		return nil, fmt.Errorf("read parked events: %w", err)
	}
	defer rows.Close()
	var out []driver.ParkedEventRow
	for rows.Next() {
		var r driver.ParkedEventRow
		if err := rows.Scan(&r.Path, &r.Slug, &r.Offset, &r.EventType, &r.Code, &r.Message, &r.Attempts, &r.Node,
			&r.AtMs, &r.By, &r.Reason); err != nil {
			return nil, fmt.Errorf("read parked events: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *readTx) ParkedEventCounts(ctx context.Context) (map[string]int, error) {
	rows, err := t.q.query(ctx, `SELECT slug, count(*) FROM processor_parked GROUP BY slug`)
	if err != nil {
		return nil, fmt.Errorf("count parked events: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var slug string
		var n int
		if err := rows.Scan(&slug, &n); err != nil {
			return nil, fmt.Errorf("count parked events: %w", err)
		}
		out[slug] = n
	}
	return out, rows.Err()
}

func (t *writeTx) PutParkedEvent(ctx context.Context, r driver.ParkedEventRow, fence *driver.Fence) error {
	if err := t.checkFence(fence, "park an event"); err != nil {
		return err
	}
	_, err := t.q.exec(ctx, `INSERT INTO processor_parked(`+parkedEventCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(path, slug, event_offset) DO UPDATE SET event_type = excluded.event_type, code = excluded.code,
			message = excluded.message, attempts = excluded.attempts, node = excluded.node, at_ms = excluded.at_ms,
			by_whom = excluded.by_whom, reason = excluded.reason`,
		r.Path, r.Slug, r.Offset, r.EventType, r.Code, r.Message, r.Attempts, r.Node, r.AtMs, r.By, r.Reason)
	if err != nil {
		return classify(fmt.Errorf("park an event: %w", err))
	}
	return nil
}

func (t *writeTx) DeleteParkedEvent(ctx context.Context, path, slug string, offset int64, fence *driver.Fence) (bool, error) {
	if err := t.checkFence(fence, "remove a parked event"); err != nil {
		return false, err
	}
	res, err := t.q.exec(ctx, `DELETE FROM processor_parked WHERE path = ? AND slug = ? AND event_offset = ?`, path, slug, offset)
	if err != nil {
		return false, classify(fmt.Errorf("remove a parked event: %w", err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, classify(fmt.Errorf("remove a parked event: %w", err))
	}
	return n > 0, nil
}
