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
// When the server runs on this machine it also reads the server's CPU time (postgresCPU).
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
		out := map[string]float64{"PG commits/s": commits, "PG WAL writes/s": writes, "PG WAL syncs/s": syncs}
		// The server's CPU, when it runs here (its data directory is readable: a server of the
		// benchmark's own, bench/pg-own.sh). SHOW data_directory needs a superuser or
		// pg_read_all_settings; without it the metric is left out.
		var dir string
		if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err == nil {
			if cpu, err := postgresCPU(dir); err == nil {
				out[pgCPUKey] = cpu.Seconds()
			}
		}
		return out, nil
	}
}
