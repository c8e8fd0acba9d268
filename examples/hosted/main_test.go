package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/freeport"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/node"
)

// The example runs as a real process and is driven the way its doc comment says, with HTTP only.

var (
	buildOnce sync.Once
	hostedBin string
	buildErr  error
)

func buildHosted(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "foldstream-hosted-test")
		if err != nil {
			buildErr = err
			return
		}
		hostedBin = filepath.Join(dir, "hosted")
		if out, err := exec.Command("go", "build", "-o", hostedBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build examples/hosted: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return hostedBin
}

// hostedProc is one run of the example.
type hostedProc struct {
	cmd   *exec.Cmd
	done  chan struct{}
	ready chan bool // true once it printed that it serves; false when it exited before
	mu    sync.Mutex
	logs  strings.Builder
}

// startHosted starts the example on db and addr and waits until it serves.
func startHosted(t *testing.T, db, addr string) *hostedProc {
	t.Helper()
	p := launchHosted(t, db, addr)
	p.waitServing(t)
	return p
}

// launchHosted starts the example on db and addr.
func launchHosted(t *testing.T, db, addr string) *hostedProc {
	t.Helper()
	p := &hostedProc{cmd: exec.Command(buildHosted(t), "-db", db, "-addr", addr), done: make(chan struct{}), ready: make(chan bool, 1)}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // by its own PID; a no-op once it exited
		<-p.done
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "serving ") {
				p.ready <- true
				signalled = true
			}
		}
		if !signalled {
			p.ready <- false
		}
	}()
	go func() {
		b, _ := io.ReadAll(stderr)
		p.mu.Lock()
		p.logs.Write(b)
		p.mu.Unlock()
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// waitServing waits until the example prints that it serves.
func (p *hostedProc) waitServing(t *testing.T) {
	t.Helper()
	select {
	case ok := <-p.ready:
		if !ok {
			<-p.done
			t.Fatalf("the example exited before serving:\n%s", p.log())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the example did not serve within 60 s:\n%s", p.log())
	}
}

func (p *hostedProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop ends the process as Ctrl-C would (SIGTERM: a clean shutdown) and waits for it.
func (p *hostedProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the example did not stop within 60 s of SIGTERM:\n%s", p.log())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the example exited with %d:\n%s", code, p.log())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// offsetOf reads a protocol offset ("<read seq>_<offset>") as the stream position it names.
func offsetOf(t *testing.T, s string) int64 {
	t.Helper()
	i := strings.LastIndexByte(s, '_')
	n, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		t.Fatalf("offset %q: %v", s, err)
	}
	return n
}

type streamInfo struct {
	Tail       string `json:"tail"`
	Processors []struct {
		Slug   string `json:"slug"`
		Offset int64  `json:"offset"`
		Owner  string `json:"owner"`
		Open   bool   `json:"open"`
		State  string `json:"state"`
	} `json:"processors"`
}

// info asks /v1/streams/info for the stream, which never opens an engine.
func info(t *testing.T, base, path string) streamInfo {
	t.Helper()
	resp, err := http.Get(base + "/v1/streams/info?path=" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/streams/info?path=%s: %d %s", path, resp.StatusCode, body)
	}
	var in streamInfo
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatalf("info %s: %v", body, err)
	}
	if len(in.Processors) != 1 || in.Processors[0].Slug != "counter" {
		t.Fatalf("info: processors %s; want the counter", body)
	}
	return in
}

func send(t *testing.T, method, url, body string, want int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s; want %d", method, url, resp.StatusCode, b, want)
	}
	return resp
}

// tick POSTs a ticked event and returns the stream position after it.
func tick(t *testing.T, base string, by int) int64 {
	t.Helper()
	resp := send(t, http.MethodPost, base+"/v1/stream/counters/a", fmt.Sprintf(`{"type":"ticked","payload":{"by":%d}}`, by), http.StatusNoContent)
	return offsetOf(t, resp.Header.Get("Stream-Next-Offset"))
}

// until polls cond (an HTTP question) until it holds, failing past a deadline generous for a
// loaded machine.
func until(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("%s: not within 30 s", what)
		}
	}
	return time.Since(start)
}

// The README's program counts ticks written over HTTP on a stream nobody reads: the processor
// reacts to every append by itself (its state is asked for only through /v1/streams/info, which
// opens no engine), and a clean restart writes nothing to the stream — the caught-up processor is
// not caught up again, so no wake record lands. On SQLite and on one PostgreSQL node.
func TestHostedCountsHTTPTicksWithNobodyReadingAndARestartWritesNothing(t *testing.T) {
	dbs := []struct {
		name string
		db   func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "hosted.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.URL(t) }},
	}
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			db, addr := d.db(t), freeAddr(t)
			base := "http://" + addr
			p := startHosted(t, db, addr)
			send(t, http.MethodPut, base+"/v1/stream/counters/a", "", http.StatusCreated)
			reduced := func(through int64) func() bool {
				return func() bool { return info(t, base, "/counters/a").Processors[0].Offset >= through }
			}
			first := tick(t, base, 2)
			took := until(t, "the counter reduces the first tick with nobody reading", reduced(first))
			t.Logf("first tick reduced %v after its append was acknowledged", took)
			second := tick(t, base, 3)
			took = until(t, "the counter reduces the second tick with nobody reading", reduced(second))
			t.Logf("second tick reduced %v after its append was acknowledged", took)
			in := info(t, base, "/counters/a")
			tail := offsetOf(t, in.Tail)
			until(t, "the counter reduces through the tail", reduced(tail))
			t.Logf("SIGTERM ended the example in %v", p.stopTimed(t))

			p = startHosted(t, db, addr)
			// On PostgreSQL the stopped node handed its processor's lease over: the restarted
			// node takes it back and settles it (idle: nothing to do), or opens it. Wait until
			// it did either, then until an opened engine caught up with what it wrote.
			until(t, "the restarted node takes the processor back", func() bool {
				return info(t, base, "/counters/a").Processors[0].State != "unowned"
			})
			until(t, "an engine opened at restart catches up", func() bool {
				in := info(t, base, "/counters/a")
				return !in.Processors[0].Open || in.Processors[0].Offset >= offsetOf(t, in.Tail)
			})
			if got := offsetOf(t, info(t, base, "/counters/a").Tail); got != tail {
				t.Fatalf("the restart moved the stream's tail %d → %d with no append", tail, got)
			}
			// The next append is the first record after the restart (nothing was written before
			// it), and the counter reduces it with nobody reading.
			third := tick(t, base, 4)
			until(t, "the counter reduces a tick after the restart with nobody reading", reduced(third))
			resp, err := http.Get(base + "/v1/stream/counters/a?offset=" + in.Tail)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var after []struct {
				Type    string           `json:"type"`
				Payload struct{ By int } `json:"payload"`
			}
			if err := json.Unmarshal(body, &after); err != nil || len(after) == 0 || after[0].Type != "ticked" || after[0].Payload.By != 4 {
				t.Fatalf("the records after the tail before the restart are %s (%v); want the tick appended after it first", body, err)
			}
			if got := ticks(t, base); got != 9 {
				t.Fatalf("counter state %d ticks; want 9", got)
			}
			p.stopTimed(t)
		})
	}
}

// stopTimed is stop, returning how long the process took from SIGTERM to its exit; it fails the
// test when the process does not exit cleanly within the node's shutdown grace (a margin added
// for the process to start exiting on a loaded machine).
func (p *hostedProc) stopTimed(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	p.stop(t)
	took := time.Since(start)
	if took > node.DefaultShutdownGrace+5*time.Second {
		t.Fatalf("SIGTERM ended the example after %v; want within the grace (%v)\n%s", took, node.DefaultShutdownGrace, p.log())
	}
	if log := p.log(); !strings.Contains(log, "shut down") || strings.Contains(log, "did not finish") {
		t.Fatalf("the example's shutdown did not finish every phase in time:\n%s", log)
	}
	return took
}

// Two nodes of the example share one PostgreSQL database; the node running the counter is
// SIGTERMed. It must exit cleanly within its grace having handed the counter over: the moment it
// has exited, the other node sees no live lease of it (a node that closed its store before its
// host, or died, leaves its lease live until it expires, LeaseTTL later), and the other node
// reduces the next tick at once, from the checkpoint the stopped node wrote.
func TestHostedSIGTERMHandsTheCounterToTheOtherNodeAtOnce(t *testing.T) {
	db := pgtest.URL(t)
	addrA, addrB := freeAddr(t), freeAddr(t)
	procs := map[string]*hostedProc{"http://" + addrA: startHosted(t, db, addrA), "http://" + addrB: startHosted(t, db, addrB)}
	baseA := "http://" + addrA
	send(t, http.MethodPut, baseA+"/v1/stream/counters/a", "", http.StatusCreated)
	first := tick(t, baseA, 2)
	var owner string
	until(t, "a node runs the counter and reduced the first tick", func() bool {
		p := info(t, baseA, "/counters/a").Processors[0]
		owner = p.Owner
		return p.Offset >= first && p.Owner != ""
	})
	var ownerBase, otherBase string
	for base, p := range procs {
		if strings.Contains(owner, fmt.Sprintf("-%d-", p.cmd.Process.Pid)) {
			ownerBase = base
		} else {
			otherBase = base
		}
	}
	if ownerBase == "" {
		t.Fatalf("the counter's owner %q is neither node", owner)
	}
	took := procs[ownerBase].stopTimed(t)
	t.Logf("SIGTERM ended the counter's node in %v", took)
	if p := info(t, otherBase, "/counters/a").Processors[0]; p.Owner == owner {
		t.Fatalf("after the counter's node exited its lease is still live (state %s): it did not hand the counter over", p.State)
	}
	start := time.Now()
	second := tick(t, otherBase, 3)
	until(t, "the other node reduces the next tick", func() bool { return info(t, otherBase, "/counters/a").Processors[0].Offset >= second })
	t.Logf("the other node reduced the next tick %v after its append", time.Since(start))
	if got := ticks(t, otherBase); got != 5 {
		t.Fatalf("the counter after the hand-over holds %d ticks; want 5", got)
	}
	procs[otherBase].stopTimed(t)
}

// ticks reads the counter of /counters/a through base's processor route.
func ticks(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/v1/processor/counter/counters/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var snap struct {
		State struct{ Ticks int } `json:"state"`
	}
	if err := json.Unmarshal(body, &snap); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("counter: %d %s (%v)", resp.StatusCode, body, err)
	}
	return snap.State.Ticks
}

// The example started before its PostgreSQL (a server of the test's own, down) does not exit: it
// answers 503 UNAVAILABLE with Retry-After while it waits, then serves and counts once the
// database is up.
func TestHostedStartedBeforeItsDatabaseWaitsAnswering503ThenServes(t *testing.T) {
	pg := pgtest.StartServer(t)
	pg.Stop("fast")
	addr := freeAddr(t)
	base := "http://" + addr
	p := launchHosted(t, pg.URL(), addr)
	var res *http.Response
	until(t, "the waiting node answers", func() bool {
		var err error
		res, err = http.Get(base + "/v1/stream/counters/a")
		return err == nil
	})
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Header.Get("Foldstream-Error-Code") != "UNAVAILABLE" {
		t.Fatalf("while the database is down: %d, Retry-After %q, code %q; want 503 UNAVAILABLE with Retry-After",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Foldstream-Error-Code"))
	}
	pg.StartAsync()
	p.waitServing(t)
	send(t, http.MethodPut, base+"/v1/stream/counters/a", "", http.StatusCreated)
	first := tick(t, base, 2)
	until(t, "the counter reduces a tick once the database is up", func() bool { return info(t, base, "/counters/a").Processors[0].Offset >= first })
	p.stopTimed(t)
}
