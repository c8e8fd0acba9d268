// Package refserver starts the upstream reference Durable Streams server (Node,
// @durable-streams/server pinned in client/testdata/refserver) on 127.0.0.1 for integration tests.
package refserver

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var installOnce sync.Once

// Dir returns the directory holding the server script and its package.json.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "client", "testdata", "refserver")
}

// Start runs the reference server for the test's lifetime and returns its base URL
// ("http://127.0.0.1:PORT"). It skips the test only when node is not installed; a missing
// node_modules is installed with `npm ci` once.
func Start(tb testing.TB) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("node is not installed; the reference server cannot run")
	}
	dir := Dir()
	installOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@durable-streams", "server")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Logf("npm ci in %s: %v\n%s", dir, err, out)
		}
	})
	cmd := exec.Command(node, "server.mjs")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start reference server: %v", err)
	}
	tb.Cleanup(func() {
		stdin.Close() // the script exits when stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
				lines <- u
			}
		}
	}()
	select {
	case u := <-lines:
		return u
	case <-time.After(30 * time.Second):
		tb.Fatal("reference server did not start within 30s")
		return ""
	}
}
