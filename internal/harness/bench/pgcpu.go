package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pgCPUKey is the cumulative CPU of a local PostgreSQL server in seconds, in Counters' readings;
// the runner turns its difference into PGCPUMetric.
const pgCPUKey = "PG CPU s"

// PGCPUMetric is the CPU time (user + system) of the PostgreSQL server a target writes to, per
// message: the postmaster and every backend and helper process it started. It is measured only
// when the server runs on this machine (its data directory and /proc are readable) and is not part
// of the server CPU metric, which is the foldstream process alone.
var PGCPUMetric = Metric{"PG server CPU µs/msg", false}

// postgresCPU returns the CPU the PostgreSQL server whose data directory is dataDir has used so
// far: the postmaster's own time, the time of its children that have exited (which it reaped:
// cutime and cstime), and the time of the children still running.
func postgresCPU(dataDir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: bad pid %q", first)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pm))
	if err != nil {
		return 0, err
	}
	total, err := parseStatCPUWithChildren(string(stat))
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // ended meanwhile: its time is in the postmaster's cutime now
		}
		if ppid, err := parseStatPPID(string(b)); err != nil || ppid != pm {
			continue
		}
		if d, err := parseStatCPU(string(b)); err == nil {
			total += d
		}
	}
	return total, nil
}

// statFields returns the fields of a /proc/PID/stat text after the command name, from field 3
// (state) on.
func statFields(stat string) ([]string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("proc stat: no command name")
	}
	return strings.Fields(stat[i+1:]), nil
}

// parseStatPPID returns the parent pid (field 4) of a /proc/PID/stat text.
func parseStatPPID(stat string) (int, error) {
	f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	if len(f) < 2 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	return strconv.Atoi(f[1])
}

// parseStatCPUWithChildren returns utime + stime + cutime + cstime (fields 14–17) of a
// /proc/PID/stat text.
func parseStatCPUWithChildren(stat string) (time.Duration, error) {
	return sumStatTicks(stat, 4)
}
