package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/foldstream/foldstream/internal/harness/freeport"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// The multi-node tests run real `node` processes (testdata/node: a store opened from the
// postgres:// URL, host.New with the zero Config, one RegisterPattern, server.New) on one
// database, and kill, stop and restart them.

var (
	buildOnce sync.Once
	nodeBin   string
	buildErr  error
)

// buildNode builds testdata/node once per test binary.
func buildNode(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "foldstream-node")
		if err != nil {
			buildErr = err
			return
		}
		nodeBin = filepath.Join(dir, "node")
		out, err := exec.Command("go", "build", "-o", nodeBin, "./testdata/node").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build testdata/node: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return nodeBin
}

// node is one running (or stopped) node process.
type node struct {
	t    testing.TB
	bin  string
	db   string
	addr string // fixed host:port, reused across restarts
	ttl  time.Duration
	name string
	args []string // extra flags
	runs int      // starts so far: the incarnation number

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs *strings.Builder
}

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func startNodes(t *testing.T, db string, n int, ttl time.Duration, args ...string) []*node {
	t.Helper()
	bin := buildNode(t)
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = &node{t: t, bin: bin, db: db, addr: freeAddr(t), ttl: ttl, logs: &strings.Builder{},
			name: fmt.Sprintf("n%d", i), args: args}
		nodes[i].start()
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.kill()
		}
	})
	return nodes
}

func (n *node) url() string { return "http://" + n.addr }

// start starts the process and waits until it serves.
func (n *node) start() {
	n.t.Helper()
	n.await(n.launch())
}

// launch starts the process; await(ready) waits until it serves.
func (n *node) launch() (ready chan struct{}) {
	n.t.Helper()
	n.mu.Lock() // incarnation reads runs from the soak's samplers while nodes restart
	n.runs++
	runs := n.runs
	n.mu.Unlock()
	args := append([]string{"--db", n.db, "--addr", n.addr, "--lease-ttl", n.ttl.String(),
		"--name", fmt.Sprintf("%s#%d", n.name, runs)}, n.args...)
	cmd := exec.Command(n.bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	ready = make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "serving ") {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
	}()
	go func() {
		b, _ := io.ReadAll(stderr)
		n.mu.Lock()
		n.logs.Write(b)
		n.mu.Unlock()
		_ = cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return ready
}

// await waits until the process launch started serves.
func (n *node) await(ready chan struct{}) {
	n.t.Helper()
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		n.t.Fatalf("node %s did not start", n.addr)
	}
	// The port answers once the process printed its address.
	exited := false
	if !wait.For(10*time.Second, func() bool { // polling a port another process opens
		c, err := net.Dial("tcp", n.addr)
		if err == nil {
			c.Close()
			return true
		}
		select {
		case <-done:
			exited = true
		default:
		}
		return exited
	}) {
		n.t.Fatalf("node %s does not answer", n.addr)
	}
	if exited {
		n.t.Fatalf("node %s exited at start:\n%s", n.addr, n.logText())
	}
}

// kill SIGKILLs the process and waits for it to exit.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = cmd.Process.Kill()
	<-done
}

// term SIGTERMs the process and waits for it to exit.
func (n *node) term() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-done
}

// incarnation is the name the running process puts in its effect calls.
func (n *node) incarnation() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("%s#%d", n.name, n.runs)
}

func (n *node) logText() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

// balancer is an http.RoundTripper spreading requests over the nodes round-robin and moving on to
// the next node when one does not answer (a load balancer's health check, in one line).
type balancer struct {
	nodes []*node
	next  atomic.Int64
	base  http.RoundTripper
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	var lastErr error
	for range 2 * len(b.nodes) {
		nd := b.nodes[int(b.next.Add(1))%len(b.nodes)]
		r := req.Clone(req.Context())
		r.URL.Host = nd.addr
		r.Host = nd.addr
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r.Body = body
		}
		resp, err := b.base.RoundTrip(r)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			return nil, err // the request may have reached the node: let the caller retry it
		}
	}
	return nil, lastErr
}

// getJSON GETs url into out, retrying through restarts until ctx ends.
func getJSON(ctx context.Context, hc *http.Client, url string, out any) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return json.Unmarshal(body, out)
			}
			err = fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pgQueryRow runs one query against the test database and scans its row.
func pgQueryRow(ctx context.Context, db, query string, dest ...any) error {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, query).Scan(dest...)
}
