package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// haGet answers method on url with body (JSON), within 30 s.
func haDo(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: 30 * time.Second}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// waitReady polls base's /readyz until it answers 200, for up to limit.
func waitReady(t *testing.T, base string, limit time.Duration, log func() string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond) // polling the node as a load balancer would
	defer tick.Stop()
	deadline := time.Now().Add(limit)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node is not ready after %v: %v\n%s", limit, err, log())
		}
		<-tick.C
	}
}

// TestAFailoverToASynchronousStandbyLosesAndDuplicatesNothing runs one node on a PostgreSQL
// primary with a synchronous standby, given both in one multi-host URL (target_session_attrs=
// read-write), while idempotent producers append through it. The primary is SIGKILLed and the
// standby promoted: the node must be writing again within 10 s of the kill, and in the end every
// stream holds each message its producer appended exactly once, in order — none of those
// acknowledged before the kill is lost (the standby had them before they were acknowledged), and
// none retried across it is written twice.
func TestAFailoverToASynchronousStandbyLosesAndDuplicatesNothing(t *testing.T) {
	began := time.Now()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	t.Logf("primary and synchronous standby up in %v", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeLoopbackAddr(t)
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", addr, "--db", pgtest.MultiHostURL(primary, standby) + "&write_timeout=2s",
			"--log-level", "warn", "--shutdown-grace", "5s"}, &lockedBuffer{}, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not shut down")
		}
	}()
	base := "http://" + addr
	waitReady(t, base, 30*time.Second, stderr.String)
	t.Logf("node ready at %v", time.Since(began).Round(time.Millisecond))

	const producers = 4
	cfg := client.Config{Retry: client.RetryPolicy{MaxAttempts: 40, MaxDelay: time.Second}}
	ps := make([]*client.IdempotentProducer, producers)
	for i := range ps {
		url := fmt.Sprintf("%s/v1/stream/ha-%d", base, i)
		if res, _ := haDo(t, http.MethodPut, url, ""); res.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d", res.StatusCode)
		}
		s, err := client.NewStream(url, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.SetContentType("application/json")
		if ps[i], err = client.NewIdempotentProducer(s, fmt.Sprintf("p%d", i), client.ProducerConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if res, _ := haDo(t, http.MethodPut, base+"/v1/stream/ha-probe", ""); res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}
	stop := make(chan struct{})
	sent := make([]int, producers)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					sent[i] = n
					return
				default:
				}
				if err := p.AppendJSON(n); err != nil {
					t.Errorf("producer %d: %v", i, err)
					sent[i] = n
					return
				}
				if n%10 == 9 {
					waitTickFor(10 * time.Millisecond) // about 1,000 messages a second each: the test checks every one
				}
			}
		})
	}
	acked := func() string { return ps[0].LastOffset() }
	// Writing flows before the kill.
	for first := acked(); acked() == first; {
		waitTickFor(10 * time.Millisecond)
	}
	primary.Kill()
	killed := time.Now()
	standby.Promote()
	// Writing again: an append sent now is acknowledged (not one committed before the kill whose
	// answer was still on its way).
	for {
		res, _ := haDo(t, http.MethodPost, base+"/v1/stream/ha-probe", `{"probe":1}`)
		if res.StatusCode/100 == 2 {
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("the node is not writing again 10 s after the primary was killed (last answer %d)\n%s", res.StatusCode, stderr.String())
		}
		waitTickFor(10 * time.Millisecond)
	}
	t.Logf("writing again %v after the primary was killed", time.Since(killed).Round(time.Millisecond))
	// A little more writing on the promoted server, then every producer is flushed.
	for again := acked(); acked() == again; {
		waitTickFor(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer fcancel()
	for i, p := range ps {
		if err := p.Close(fctx); err != nil {
			t.Fatalf("producer %d: %v\n%s", i, err, stderr.String())
		}
	}
	t.Logf("producers flushed at %v", time.Since(began).Round(time.Millisecond))
	total := 0
	for i := range ps {
		_, body := haDo(t, http.MethodGet, fmt.Sprintf("%s/v1/stream/ha-%d?offset=-1", base, i), "")
		var got []int
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if len(got) != sent[i] {
			t.Errorf("stream %d holds %d messages, its producer appended %d (all acknowledged)", i, len(got), sent[i])
		}
		for n, v := range got {
			if v != n {
				t.Fatalf("stream %d: message %d is %d: lost or duplicated", i, n, v)
			}
		}
		total += len(got)
	}
	t.Logf("%d messages acknowledged across the failover, 0 lost, 0 duplicated", total)
}

// waitTickFor waits d (polling a condition another goroutine or process changes).
func waitTickFor(d time.Duration) { <-time.After(d) }

// TestWhenCommitsStallAppendsAnswer503InTimeAndSIGTERMEndsWithinTheGrace runs `foldstream serve`
// (a real process) on a primary that requires a synchronous standby, and kills the standby: every
// COMMIT then waits for ever on the database. An append must answer 503 with Retry-After within
// the write timeout, /readyz 503, and SIGTERM — sent while an append waits on its commit — must
// end the process within --shutdown-grace.
func TestWhenCommitsStallAppendsAnswer503InTimeAndSIGTERMEndsWithinTheGrace(t *testing.T) {
	began := time.Now()
	bin := filepath.Join(t.TempDir(), "foldstream")
	built := make(chan error, 1)
	go func() { // while the servers start
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("build: %w\n%s", err, out)
		}
		built <- err
	}()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(true)
	t.Logf("primary and synchronous standby up in %v", time.Since(began).Round(time.Millisecond))
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Logf("foldstream built at %v", time.Since(began).Round(time.Millisecond))
	const writeTimeout, grace = 4 * time.Second, 2 * time.Second
	addr := freeLoopbackAddr(t)
	var stderr lockedBuffer
	cmd := exec.Command(bin, "serve", "--addr", addr, "--db", primary.URL()+"&write_timeout="+writeTimeout.String(),
		"--log-level", "warn", "--shutdown-grace", grace.String())
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	base := "http://" + addr
	waitReady(t, base, 30*time.Second, stderr.String)
	url := base + "/v1/stream/stall"
	if res, _ := haDo(t, http.MethodPut, url, ""); res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}
	if res, _ := haDo(t, http.MethodPost, url, `{"n":1}`); res.StatusCode != http.StatusNoContent && res.StatusCode != http.StatusOK {
		t.Fatalf("append before the stall: %d", res.StatusCode)
	}

	standby.Kill()
	start := time.Now()
	res, body := haDo(t, http.MethodPost, url, `{"n":2}`)
	took := time.Since(start)
	code := res.Header.Get("Foldstream-Error-Code")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || code != "COMMIT_OUTCOME_UNKNOWN" {
		t.Fatalf("append while commits stall: %d Retry-After %q code %q (%s), want 503 COMMIT_OUTCOME_UNKNOWN with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), code, body)
	}
	if took > writeTimeout+3*time.Second {
		t.Fatalf("append while commits stall answered after %v, want within the write timeout (%v)", took, writeTimeout)
	}
	if res, _ := haDo(t, http.MethodGet, base+"/readyz", ""); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while commits stall: %d, want 503", res.StatusCode)
	}
	if !stderr.holds("commits stall") {
		t.Fatalf("the node does not log that its commits stall:\n%s", stderr.String())
	}

	// An append waits on its commit when SIGTERM comes.
	inflight := make(chan struct{})
	go func() {
		defer close(inflight)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"n":3}`))
		req.Header.Set("Content-Type", "application/json")
		if res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req); err == nil {
			res.Body.Close()
		}
	}()
	waitTickFor(200 * time.Millisecond) // the append reaches the node's writer
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	select {
	case <-exited:
		t.Logf("SIGTERM ended the node in %v (grace %v)", time.Since(termed).Round(time.Millisecond), grace)
	case <-time.After(grace + 1500*time.Millisecond):
		t.Fatalf("SIGTERM did not end the node within the grace (%v) while commits stall\n%s", grace, stderr.String())
	}
	<-inflight
	exited <- nil // for the cleanup
	_ = os.Remove(bin)
}
