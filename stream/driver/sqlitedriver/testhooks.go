package sqlitedriver

import (
	"context"
	"database/sql"

	"github.com/foldstream/foldstream/internal/testhooks"
)

// init hands the driver's test-only counter and raw queries to internal/testhooks, for the store's
// tests.
func init() {
	testhooks.SQLiteSavepoints = func(d any) int64 { return d.(*Driver).savepoints.Load() }
	testhooks.SQLiteQueryRow = func(ctx context.Context, d any, query string, args ...any) *sql.Row {
		return d.(*Driver).rdb.QueryRowContext(ctx, query, args...)
	}
	testhooks.SQLiteQuery = func(ctx context.Context, d any, query string, args ...any) (*sql.Rows, error) {
		return d.(*Driver).rdb.QueryContext(ctx, query, args...)
	}
}
