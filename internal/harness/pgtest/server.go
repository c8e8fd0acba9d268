package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/foldstream/foldstream/internal/harness/freeport"
)

// Server is a PostgreSQL server of the test's own: a fresh cluster made with initdb in a temporary
// directory, listening on its own port on 127.0.0.1, that the test may stop, restart and kill
// without disturbing the shared server other tests use. It is stopped and removed when the test
// ends.
//
// PostgreSQL refuses to run as root, so when the test runs as root (as CI does) every server
// command runs as the operating system user "postgres", which owns the directory.
type Server struct {
	t    testing.TB
	bin  string // directory of initdb, pg_ctl, postgres
	dir  string // owned by the server's user; holds data/, the socket and the log
	port int
	cred *syscall.Credential // nil: run as ourselves
}

// Binaries returns the directory of the newest PostgreSQL server binaries installed the Debian
// way (/usr/lib/postgresql/VERSION/bin), or "" when there are none.
func Binaries() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return ""
	}
	sort.Slice(ok, func(i, j int) bool { return version(ok[i]) < version(ok[j]) })
	return ok[len(ok)-1]
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// StartServer creates and starts a server of the test's own. Without PostgreSQL's binaries it
// skips the test, or fails it under CI.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := newServer(t)
	// Small and quick to create; fsync stays on, as the durability the tests check needs.
	s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions", "--no-sync")
	s.appendConf("postgresql.conf", "listen_addresses = '127.0.0.1'\nport = "+strconv.Itoa(s.port)+"\nunix_socket_directories = '"+s.dir+"'\n"+
		"shared_buffers = 16MB\nmax_connections = 60\nfsync = on\nsynchronous_commit = on\nlog_min_messages = warning\n")
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.baseURL("postgres"))
	if err != nil {
		t.Fatalf("connect to the test's own PostgreSQL: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE test"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return s
}

// newServer makes the directory of a server of the test's own (owned by the user postgres when
// the test runs as root) and picks its port; the server is killed and the directory removed when
// the test ends. Without PostgreSQL's binaries it skips the test, or fails it under CI.
func newServer(t testing.TB) *Server {
	t.Helper()
	bin := Binaries()
	if bin == "" {
		if InCI() {
			t.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: CI must install them (.ci/run does)")
		}
		t.Skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
	}
	dir, err := os.MkdirTemp("", "pgtest-server-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir, port: freePort(t)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("running as root, PostgreSQL needs the operating system user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.Kill()
		os.RemoveAll(dir)
	})
	return s
}

// appendConf appends text to the configuration file name of the server's data directory.
func (s *Server) appendConf(name, text string) {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.data(), name), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		s.t.Fatal(err)
	}
}

// StartStandby makes a streaming standby of s, a server of the test's own: pg_basebackup copies
// s's data directory to a new one (standby.signal and primary_conninfo written, the WAL streamed
// along), the standby gets its own port and connects to s as application_name "standby", and it
// is started and waited for until s sees it streaming. With synchronous, s then requires it as its
// synchronous standby (synchronous_standby_names = 'standby'): every COMMIT on s waits until the
// standby has its WAL, so a commit s acknowledged survives s's death once the standby is promoted.
func (s *Server) StartStandby(synchronous bool) *Server {
	s.t.Helper()
	sb := newServer(s.t)
	s.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-D", sb.data(), "-R", "-X", "stream", "-c", "fast", "--no-sync")
	sb.appendConf("postgresql.auto.conf", "port = "+strconv.Itoa(sb.port)+"\nunix_socket_directories = '"+sb.dir+"'\n"+
		"primary_conninfo = 'host=127.0.0.1 port="+strconv.Itoa(s.port)+" user=postgres application_name=standby'\n")
	sb.Start()
	if synchronous {
		s.Exec("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
		s.Exec("SELECT pg_reload_conf()")
	}
	want := "async"
	if synchronous {
		want = "sync"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		err := s.queryRow(`SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'`, &state)
		if err == nil && state == want {
			return sb
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the standby is not streaming as %s after 30 s (%q, %v)\nstandby log:\n%s", want, state, err, sb.Log())
		}
		time.Sleep(20 * time.Millisecond) // waiting for another process to connect and catch up
	}
}

// Promote promotes the standby to a primary and waits until it accepts writes.
func (s *Server) Promote() {
	s.t.Helper()
	s.run("pg_ctl", "promote", "-D", s.data(), "-w", "-t", "60")
}

// Exec runs a statement on the server's postgres database (configuration, inspection).
func (s *Server) Exec(sql string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.baseURL("postgres"))
	if err != nil {
		s.t.Fatalf("connect to the test's own PostgreSQL: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

func (s *Server) queryRow(sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.baseURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// MultiHostURL is the test database on any of servers, the one that takes writes first: what a
// node is given to follow a failover (target_session_attrs=read-write).
func MultiHostURL(servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.Addr()
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/test?sslmode=disable&target_session_attrs=read-write"
}

func freePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) baseURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// URL is the server's test database.
func (s *Server) URL() string { return s.baseURL("test") }

// Port is the port the server listens on (127.0.0.1).
func (s *Server) Port() int { return s.port }

// command returns a server command that runs as the server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		s.t.Fatalf("%s %s: %v\n%s\nserver log:\n%s", name, strings.Join(args, " "), err, out, s.Log())
	}
}

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return string(b)
}

// Start starts the server and waits until it accepts connections (crash recovery included).
func (s *Server) Start() {
	s.t.Helper()
	s.run("pg_ctl", "start", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60")
}

// StartAsync starts the server without waiting for it to accept connections: a node may then
// see it "starting up".
func (s *Server) StartAsync() {
	s.t.Helper()
	s.run("pg_ctl", "start", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-W")
}

// Stop stops the server with pg_ctl's mode ("fast": sessions are ended, a clean shutdown;
// "immediate": no shutdown checkpoint, crash recovery at the next start).
func (s *Server) Stop(mode string) {
	s.t.Helper()
	s.run("pg_ctl", "stop", "-D", s.data(), "-m", mode, "-w", "-t", "60")
}

// Restart restarts the server with pg_ctl restart -m mode and waits until it accepts connections.
func (s *Server) Restart(mode string) {
	s.t.Helper()
	s.run("pg_ctl", "restart", "-D", s.data(), "-m", mode, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60")
}

// Kill SIGKILLs the postmaster and every server process, as a machine crash would: nothing
// shuts down, the next Start recovers from the WAL. A server that is not running is left alone.
func (s *Server) Kill() {
	pid := s.postmasterPID()
	if pid <= 0 {
		return
	}
	// Stop the postmaster first so it forks no new process while its children are found.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	procs := append(childrenOf(pid), pid)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range procs {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // waiting for the kernel to end another process tree
		}
	}
	// A dead postmaster may linger as a zombie until its parent reaps it, and PostgreSQL takes a
	// lock file naming a pid that still exists for a running server. Every server process is dead
	// now, as after a reboot, so the lock files (data directory and socket) are stale.
	_ = os.Remove(filepath.Join(s.data(), "postmaster.pid"))
	sock := filepath.Join(s.dir, ".s.PGSQL."+strconv.Itoa(s.port))
	_ = os.Remove(sock + ".lock")
	_ = os.Remove(sock)
}

// postmasterPID reads the running postmaster's pid from postmaster.pid (0 when none runs).
func (s *Server) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || !alive(pid) {
		return 0
	}
	return pid
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
