package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PostgresCounters returns a Target.Counters reading PostgreSQL's own counters through url:
// transactions committed in url's database (pg_stat_database.xact_commit) and WAL writes and
// syncs of the whole server (pg_stat_wal, PostgreSQL 14 and later). They count every client of
// the server, so measure on a server nothing else uses. pg_stat_wal is updated as the server
// flushes its statistics (about once a second), which is why measurements should last seconds.
func PostgresCounters(url string) func(ctx context.Context) (map[string]float64, error) {
	return func(ctx context.Context) (map[string]float64, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("postgres counters: %w", err)
		}
		defer conn.Close(context.Background())
		// A fresh snapshot of the shared statistics, not the one cached for this transaction.
		if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return nil, fmt.Errorf("postgres counters: %w", err)
		}
		var commits, writes, syncs float64
		if err := conn.QueryRow(ctx, `SELECT d.xact_commit::float8, w.wal_write::float8, w.wal_sync::float8
			FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`).Scan(&commits, &writes, &syncs); err != nil {
			return nil, fmt.Errorf("postgres counters: %w", err)
		}
		// The counters reader's own connection commits too (a few transactions per reading).
		return map[string]float64{"PG commits/s": commits, "PG WAL writes/s": writes, "PG WAL syncs/s": syncs}, nil
	}
}
