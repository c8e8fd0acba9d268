package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// waitUntil polls cond every 20 ms until it holds, failing after d with what.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		<-tick.C
	}
}

// TestReadAndTailLeaveOutPlatformRecordsUnlessAsked: the platform's own records (types under
// events.iterate.com/) are left out of read and tail, and printed with --platform.
func TestReadAndTailLeaveOutPlatformRecordsUnlessAsked(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const (
		woken = `{"type":"events.iterate.com/itx/woken","payload":{"incarnation":1,"reason":"test"}}`
		item  = `{"type":"item.added","payload":{"sku":"espresso"}}`
	)
	if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", "carts/a", woken); err != nil {
		t.Fatalf("append: %v", err)
	}
	if _, err := runCmd(t, ctx, "append", "", "--server", base, "carts/a", item); err != nil {
		t.Fatalf("append: %v", err)
	}
	out, err := runCmd(t, ctx, "read", "", "--server", base, "carts/a")
	if err != nil || out != item+"\n" {
		t.Errorf("read: %q, %v; want only the user's event", out, err)
	}
	out, err = runCmd(t, ctx, "read", "", "--server", base, "--platform", "carts/a")
	if err != nil || out != woken+"\n"+item+"\n" {
		t.Errorf("read --platform: %q, %v; want both records", out, err)
	}

	for _, platform := range []bool{false, true} {
		args := []string{"--server", base, "--mode", "long-poll", "carts/a"}
		if platform {
			args = append([]string{"--platform"}, args...)
		}
		tctx, stop := context.WithCancel(ctx)
		var tailOut syncBuffer
		done := make(chan error, 1)
		go func() { done <- commands["tail"].run(tctx, args, &tailOut, io.Discard) }()
		// Append a platform record and a marker until two markers show: tail may start after
		// the first few, or between a pair's platform record and its marker; the pair after the
		// first marker it shows was appended wholly after it started.
		waitUntil(t, 20*time.Second, "tail to show two markers", func() bool {
			for _, m := range []string{woken, `{"type":"marker"}`} {
				if _, err := runCmd(t, ctx, "append", "", "--server", base, "carts/a", m); err != nil {
					t.Fatalf("append: %v", err)
				}
			}
			return strings.Count(tailOut.String(), "marker") >= 2
		})
		stop()
		if err := <-done; err != nil {
			t.Fatalf("tail: %v", err)
		}
		if got := strings.Contains(tailOut.String(), "events.iterate.com/"); got != platform {
			t.Errorf("tail (--platform %v) printed platform records: %v\n%s", platform, got, tailOut.String())
		}
	}
}

// TestOffsetsAreIntegersOrServerOffsetsEverywhereTheCLITakesOne: read --offset (and create
// --fork-offset) take a plain integer N as the offset 0000000000000000_000000000000000N, besides
// the server's own form and read's -1 and now; anything else is refused before a request.
func TestOffsetsAreIntegersOrServerOffsetsEverywhereTheCLITakesOne(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for i, m := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		args := []string{"--server", base, "nums", m}
		if i == 0 {
			args = append([]string{"--create", "--content-type", "application/json"}, args...)
		}
		if _, err := runCmd(t, ctx, "append", "", args...); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	for _, off := range []string{"2", "0000000000000000_0000000000000002"} {
		out, err := runCmd(t, ctx, "read", "", "--server", base, "--offset", off, "nums")
		if err != nil || out != "{\"n\":3}\n" {
			t.Errorf("read --offset %s: %q, %v; want the third message", off, out, err)
		}
	}
	if out, err := runCmd(t, ctx, "read", "", "--server", base, "--offset", "-1", "nums"); err != nil || strings.Count(out, "\n") != 3 {
		t.Errorf("read --offset -1: %q, %v; want all three", out, err)
	}
	if _, err := runCmd(t, ctx, "create", "", "--server", base, "--fork-of", "nums", "--fork-offset", "1", "fork"); err != nil {
		t.Fatalf("create --fork-offset 1: %v", err)
	}
	if out, err := runCmd(t, ctx, "read", "", "--server", base, "fork"); err != nil || out != "{\"n\":1}\n" {
		t.Errorf("read of a fork at offset 1: %q, %v; want the first message only", out, err)
	}
	for _, bad := range []string{"x", "-2", "1.5", "0000000000000000_000000000000000x", ""} {
		_, err := runCmd(t, ctx, "read", "", "--server", base, "--offset", bad, "nums")
		if err == nil || !strings.Contains(err.Error(), "--offset") {
			t.Errorf("read --offset %q: %v, want a refusal naming --offset", bad, err)
		}
	}
	if _, err := runCmd(t, ctx, "create", "", "--server", base, "--fork-of", "nums", "--fork-offset", "now", "fork2"); err == nil || !strings.Contains(err.Error(), "--fork-offset") {
		t.Errorf("create --fork-offset now: %v, want a refusal naming --fork-offset", err)
	}
}

// TestLsJSONPrintsTheListingAsOneArray: ls --json prints the streams as one JSON array (with -l
// each stream's processors too), and an empty listing as [].
func TestLsJSONPrintsTheListingAsOneArray(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := runCmd(t, ctx, "ls", "", "--server", base, "--json")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("ls --json of no streams: %q, %v; want []", out, err)
	}
	for _, s := range []string{"carts/b", "carts/a", "orders"} {
		if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", s, `{"n":1}`); err != nil {
			t.Fatalf("append %s: %v", s, err)
		}
	}
	for _, long := range []bool{false, true} {
		args := []string{"--server", base, "--json", "carts/"}
		if long {
			args = append(args, "-l")
		}
		out, err := runCmd(t, ctx, "ls", "", args...)
		if err != nil {
			t.Fatalf("ls %v: %v", args, err)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("ls %v: not one JSON array: %v\n%s", args, err, out)
		}
		if len(got) != 2 || got[0]["path"] != "/carts/a" || got[1]["path"] != "/carts/b" || got[0]["tail"] != "0000000000000000_0000000000000001" {
			t.Errorf("ls %v: %v, want /carts/a and /carts/b with their tails", args, got)
		}
		if _, ok := got[0]["processors"]; ok != long {
			t.Errorf("ls %v: processors present %v, want %v", args, ok, long)
		}
	}
}

// TestTailFollowsRetryAfterThroughADatabaseOutage: `foldstream serve` on PostgreSQL (a process of
// its own) loses its database while `foldstream tail` follows a stream; tail waits as the
// server's 503s and Retry-After ask, printing each wait on stderr, well past the two retries a
// request gets by default, and when the database is back it prints what is appended then. An
// interrupt ends it cleanly.
func TestTailFollowsRetryAfterThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	px, via := pgtest.NewProxy(t, pgtest.URL(t))
	bin := filepath.Join(t.TempDir(), "foldstream")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var serveLog lockedBuffer
	serve := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", via, "--db-wait", "0", "--long-poll-timeout", "300ms")
	serve.Stderr = &serveLog
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve did not say where it serves: %v\n%s", err, serveLog.String())
	}
	go io.Copy(io.Discard, stdout)
	base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "foldstream: serving ")), "/v1/stream/")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", "orders/a", `{"n":0}`); err != nil {
		t.Fatalf("append: %v", err)
	}
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	var tailOut, tailErr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- commands["tail"].run(tctx, []string{"--server", base, "--mode", "long-poll", "orders/a"}, &tailOut, &tailErr)
	}()
	waitUntil(t, 30*time.Second, "tail to follow", func() bool {
		if _, err := runCmd(t, ctx, "append", "", "--server", base, "orders/a", `{"before":true}`); err != nil {
			t.Fatalf("append: %v", err)
		}
		return strings.Contains(tailOut.String(), "before")
	})

	px.Cut()
	// Three waits: one more than the two retries a request got before (and gave up after).
	waitUntil(t, 60*time.Second, "tail to wait through the outage", func() bool {
		select {
		case err := <-done:
			t.Fatalf("tail ended during the outage: %v\nstderr:\n%s", err, tailErr.String())
		default:
		}
		return strings.Count(tailErr.String(), "until interrupted") >= 3
	})
	waits := tailErr.String()
	t.Logf("tail's stderr during the outage:\n%s", waits)
	if !strings.Contains(waits, "status 503") || !strings.Contains(waits, "retry 3 until interrupted in") {
		t.Errorf("tail's waits %q: want one line per wait, after the server's 503", waits)
	}
	px.Restore()

	waitUntil(t, 60*time.Second, "tail to show what is appended after the outage", func() bool {
		select {
		case err := <-done:
			t.Fatalf("tail ended after the outage: %v\nstderr:\n%s", err, tailErr.String())
		default:
		}
		res, err := http.Post(base+"/v1/stream/orders/a", "application/json", strings.NewReader(`{"after":true}`))
		if err == nil {
			res.Body.Close()
		}
		return strings.Contains(tailOut.String(), "after")
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("tail after an interrupt: %v, want a clean end", err)
	}
	if strings.Contains(tailOut.String(), `"n":0`) {
		t.Errorf("tail printed what came before it started:\n%s", tailOut.String())
	}
}
