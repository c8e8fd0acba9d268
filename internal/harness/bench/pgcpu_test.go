package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestStatParsersReadParentAndChildrensCPU: the parent pid is field 4, and the CPU with children
// sums utime, stime, cutime and cstime (fields 14–17), with a command name holding spaces and
// parentheses.
func TestStatParsersReadParentAndChildrensCPU(t *testing.T) {
	stat := "4242 (postgres: a (b) c) S 4100 4242 4242 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 100 1000 10\n"
	ppid, err := bench.ParseStatPPID(stat)
	if err != nil || ppid != 4100 {
		t.Fatalf("ppid = %d, %v; want 4100", ppid, err)
	}
	cpu, err := bench.ParseStatCPUWithChildren(stat)
	if err != nil || cpu != 2500*time.Millisecond {
		t.Fatalf("cpu = %v, %v; want 2.5s (250 ticks)", cpu, err)
	}
	if _, err := bench.ParseStatCPUWithChildren("4242 (x) S 1 2"); err == nil {
		t.Fatal("a short stat line parsed")
	}
}

// TestPostgresCountersIncludeTheLocalServersCPU: on a PostgreSQL server running on this machine,
// the counters carry the server's CPU, and a query that keeps a backend busy raises it.
func TestPostgresCountersIncludeTheLocalServersCPU(t *testing.T) {
	url := pgtest.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	read := bench.PostgresCounters(url)
	before, err := read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before[bench.PGCPUKey]; !ok {
		t.Fatalf("counters %v carry no server CPU: the test server must run on this machine", before)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 5000000)`).Scan(&n); err != nil || n != 5000000 {
		t.Fatalf("busy query: %d, %v", n, err)
	}
	after, err := read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := after[bench.PGCPUKey] - before[bench.PGCPUKey]; used < 0.05 {
		t.Fatalf("server CPU rose by %.3f s over a query counting 5,000,000 rows, want at least 0.05 s", used)
	}
}
