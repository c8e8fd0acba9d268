package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/foldstream/foldstream/internal/harness/freeport"
)

// Target names, as printed in the report.
const (
	TargetFoldstream = "foldstream"
	TargetReference  = "reference"
	TargetCaddy      = "caddy"
)

// readyTimeout bounds how long a server may take to accept its first request.
const readyTimeout = 30 * time.Second

// stopTimeout bounds how long a server may take to exit after SIGTERM before it is killed.
const stopTimeout = 10 * time.Second

// Target is one server under test, running as a child process on 127.0.0.1.
type Target struct {
	Name string
	Base string // http://127.0.0.1:PORT
	Log  string // file holding the server's stdout and stderr
	// DataDir holds the server's data (and its log); the many-streams scenarios report its size.
	DataDir string

	// Counters, when set, reads the target's database counters (cumulative values keyed by the
	// names of the runner's counter metrics); the runner reports their rates per measurement.
	Counters func(ctx context.Context) (map[string]float64, error)

	cmd  *exec.Cmd
	done chan error
}

// FoldstreamConfig says how to start foldstream.
type FoldstreamConfig struct {
	Bin             string        // the built cmd/foldstream (or a wrapper taking the same flags)
	ExtraArgs       []string      // appended after the serve flags, e.g. a profiling wrapper's flags
	Dir             string        // work directory; the db file goes here
	LongPollTimeout time.Duration // --long-poll-timeout
}

// StartFoldstream starts `foldstream serve` on a free loopback port with a fresh db file and the
// default durable settings (synchronous=FULL).
func StartFoldstream(ctx context.Context, c FoldstreamConfig) (*Target, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"serve",
		"--addr", addr,
		"--db", filepath.Join(c.Dir, "foldstream.db"),
		"--long-poll-timeout", c.LongPollTimeout.String(),
	}
	args = append(args, c.ExtraArgs...)
	cmd := exec.Command(c.Bin, args...)
	return start(ctx, TargetFoldstream, cmd, "http://"+addr, c.Dir)
}

// ReferenceConfig says how to start the reference server.
type ReferenceConfig struct {
	Node            string // node executable; defaults to "node"
	Dir             string // internal/harness/refserver, holding server.mjs and node_modules
	DataDir         string // the file-backed store's directory
	LongPollTimeout time.Duration
}

// StartReference starts the reference Node server with its file-backed store on a free loopback
// port.
func StartReference(ctx context.Context, c ReferenceConfig) (*Target, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	node := c.Node
	if node == "" {
		node = "node"
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("reference data dir: %w", err)
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(node, filepath.Join(dir, "server.mjs"),
		"--port", strconv.Itoa(port),
		"--data-dir", c.DataDir,
		"--long-poll-timeout-ms", strconv.FormatInt(c.LongPollTimeout.Milliseconds(), 10),
	)
	cmd.Dir = dir
	return start(ctx, TargetReference, cmd, "http://127.0.0.1:"+strconv.Itoa(port), c.DataDir)
}

// CaddyConfig says how to start the official Go server: a Caddy binary built with the
// durable_streams handler of durable-streams/durable-streams (packages/caddy-plugin), which the
// person running the benchmark builds (docs/bench.md says how).
type CaddyConfig struct {
	Bin             string        // the built caddy binary
	Dir             string        // work directory: the Caddyfile, Caddy's own state, and data/ (the file store)
	LongPollTimeout time.Duration // the handler's long_poll_timeout
}

// CaddyfileFor returns the Caddyfile StartCaddy writes: admin endpoint and automatic HTTPS off,
// one plain-HTTP site bound to 127.0.0.1:port whose /v1/stream/* routes go to durable_streams
// with its file-backed store in dataDir (the handler's defaults otherwise: 100 open segment
// files).
func CaddyfileFor(port int, dataDir string, longPoll time.Duration) string {
	return fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	route /v1/stream/* {
		durable_streams {
			data_dir %s
			long_poll_timeout %s
		}
	}
}
`, port, strconv.Quote(dataDir), longPoll)
}

// StartCaddy starts the official Go server on a free loopback port with a fresh file store.
func StartCaddy(ctx context.Context, c CaddyConfig) (*Target, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("caddy data dir: %w", err)
	}
	conf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(conf, []byte(CaddyfileFor(port, filepath.Join(dir, "data"), c.LongPollTimeout)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Bin, "run", "--config", conf, "--adapter", "caddyfile")
	// Caddy keeps its own state under XDG_DATA_HOME and XDG_CONFIG_HOME: keep it in the work dir.
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "xdg-data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg-config"),
		"HOME="+dir)
	cmd.Dir = dir
	return start(ctx, TargetCaddy, cmd, "http://127.0.0.1:"+strconv.Itoa(port), dir)
}

func start(ctx context.Context, name string, cmd *exec.Cmd, base, logDir string) (*Target, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	t := &Target{Name: name, Base: base, Log: logPath, DataDir: logDir, cmd: cmd, done: make(chan error, 1)}
	go func() {
		t.done <- cmd.Wait()
		logFile.Close()
	}()
	if err := t.waitReady(ctx); err != nil {
		_ = t.Stop()
		return nil, fmt.Errorf("start %s: %w; its log ends:\n%s", name, err, logTail(logPath))
	}
	return t, nil
}

// waitReady polls the server until it answers any HTTP request, the process exits, or
// readyTimeout passes.
func (t *Target) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, t.Base+"/v1/stream/dsbench-ready-probe", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-t.done:
			t.done <- err
			return fmt.Errorf("server exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM, waits up to stopTimeout, then kills the process.
func (t *Target) Stop() error {
	if t.cmd.Process == nil {
		return nil
	}
	_ = t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-t.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil // a signal-caused exit status is the expected outcome
		}
		return err
	case <-time.After(stopTimeout):
		_ = t.cmd.Process.Kill()
		<-t.done
		return fmt.Errorf("stop %s: killed after %s", t.Name, stopTimeout)
	}
}

// Pid is the server's process id.
func (t *Target) Pid() int { return t.cmd.Process.Pid }

// logTail returns the last lines of a server's log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// clockTicks is the kernel's USER_HZ, the unit of CPU times in /proc/PID/stat. It is 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// CPUTime is the CPU time (user + system) the server process has used so far, read from
// /proc/PID/stat (Linux only). The reference server is one node process and foldstream one Go
// process, so this is each server's whole cost.
func (t *Target) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.Pid()))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// RSS is the server process's resident memory in bytes now, from the VmRSS line of
// /proc/PID/status (Linux only).
func (t *Target) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", t.Pid()))
	if err != nil {
		return 0, err
	}
	return parseStatusRSS(string(b))
}

// parseStatusRSS returns the VmRSS of the text of /proc/PID/status, in bytes.
func parseStatusRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("proc status: bad VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("proc status: bad VmRSS line %q", line)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("proc status: no VmRSS line")
}

// parseStatCPU returns utime+stime from the text of /proc/PID/stat. The command name (field 2)
// may hold spaces and parentheses, so fields are counted after its last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	return sumStatTicks(stat, 2) // utime and stime, fields 14 and 15
}

// sumStatTicks returns the sum of n CPU-time fields of a /proc/PID/stat text starting at field 14
// (utime, stime, cutime, cstime), as a duration.
func sumStatTicks(stat string, n int) (time.Duration, error) {
	f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	// f[0] is field 3 (state), so field 14 is f[11].
	if len(f) < 11+n {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11 : 11+n] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: bad CPU time %q", s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// MachineLoad describes how busy the machine is: the 1-minute load average and, where the kernel
// reports pressure stall information, the share of the last 60 s in which some task waited for
// a CPU. The harness prints it before and after a run, because other work on a shared machine
// moves the rates far more than anything the servers do.
func MachineLoad() string {
	var parts []string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			parts = append(parts, "load average "+f[0])
		}
	}
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "avg60="); ok {
				parts = append(parts, "CPU pressure "+v+"%")
			}
		}
	}
	return strings.Join(parts, ", ")
}
