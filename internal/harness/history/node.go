package history

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildServer builds the foldstream command into dir and returns the binary's path.
func BuildServer(dir string) (string, error) {
	bin := filepath.Join(dir, "foldstream")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/foldstream/foldstream/cmd/foldstream").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build foldstream: %v\n%s", err, out)
	}
	return bin, nil
}

// Node is one `foldstream serve` process on a fixed address, which may be killed and started
// again.
type Node struct {
	Bin, DB, Addr string
	Args          []string // extra serve flags
	// Starts counts the starts so far; Kills the SIGKILLs.
	Starts, Kills int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs strings.Builder
}

// URL is the node's stream prefix.
func (n *Node) URL() string { return "http://" + n.Addr + "/v1/stream" }

// Start starts the process and waits until it serves (or ctx ends).
func (n *Node) Start(ctx context.Context) error {
	args := append([]string{"serve", "--db", n.DB, "--addr", n.Addr, "--log-level", "warn"}, n.Args...)
	cmd := exec.Command(n.Bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = &lockedWriter{mu: &n.mu, w: &n.logs}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.Starts++
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "foldstream: serving ") {
				close(ready)
				signalled = true
			}
		}
		cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("foldstream serve exited before serving: %s\n%s", cmd.ProcessState, n.Logs())
	case <-ctx.Done():
		n.Kill()
		return fmt.Errorf("foldstream serve not serving: %w\n%s", ctx.Err(), n.Logs())
	}
}

// Kill SIGKILLs the process and waits for it to end; it reports whether the kill ended it (false
// when it was not running).
func (n *Node) Kill() bool {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	killed := ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	if killed {
		n.Kills++
	}
	return killed
}

// Logs returns what the process wrote to stderr, over all its starts.
func (n *Node) Logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// StartTimeout bounds a node's start in the harness.
const StartTimeout = 60 * time.Second
