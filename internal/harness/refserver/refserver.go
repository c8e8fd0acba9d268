// Package refserver starts the upstream reference Durable Streams server on 127.0.0.1 for
// integration tests and benchmarks.
//
// This directory is also the repository's one Node project for test tooling: package.json pins
// the reference server (@durable-streams/server) and the TypeScript client
// (@durable-streams/client); server.mjs starts the server, ts-producer.mjs measures the
// TypeScript producer (bench/producer). Nothing here is part of foldstream's API.
package refserver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrNoNode reports that node is not installed.
var ErrNoNode = errors.New("node is not installed; the reference server cannot run")

var installOnce sync.Once

// Dir returns the directory of the Node project: server.mjs, package.json and node_modules.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install runs `npm ci` in Dir once per process when node_modules is missing, so a fresh clone's
// `go test ./...` needs nothing but node and npm. A failure is reported on stderr; starting the
// server then fails with node's own message.
func Install() {
	installOnce.Do(func() {
		dir := Dir()
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@durable-streams", "client")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "npm ci in %s: %v\n%s", dir, err, out)
		}
	})
}

// Start runs the reference server for the test's lifetime and returns its base URL
// ("http://127.0.0.1:PORT"). It skips the test only when node is not installed, and fails instead when CI is set.
func Start(tb testing.TB) string {
	tb.Helper()
	u, stop, err := StartProcess()
	if errors.Is(err, ErrNoNode) {
		if os.Getenv("CI") != "" {
			// CI installs node (.ci/run); a skip there would count a missing check as a pass.
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return u
}

// StartProcess runs the reference server and returns its base URL and a function that stops it.
// A missing node_modules is installed with `npm ci` once.
func StartProcess() (baseURL string, stop func(), err error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", nil, ErrNoNode
	}
	dir := Dir()
	Install()
	cmd := exec.Command(node, "server.mjs", "--exit-with-stdin")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start reference server: %w", err)
	}
	stop = func() {
		stdin.Close() // the script exits when stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
				urls <- u
			}
		}
	}()
	select {
	case u := <-urls:
		return u, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("reference server did not start within 30s")
	}
}

// RunScript runs `node script args...` in Dir (installing the Node packages first when needed)
// and returns its standard output. Like Start, it skips the test when node is not installed,
// except under CI, where it fails.
func RunScript(tb testing.TB, script string, args ...string) []byte {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal(ErrNoNode)
		}
		tb.Skip(ErrNoNode)
	}
	Install()
	cmd := exec.Command(node, append([]string{script}, args...)...)
	cmd.Dir = Dir()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("node %s: %v", script, err)
	}
	return out
}
