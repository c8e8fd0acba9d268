package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/freeport"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestServeStartedWhileTheDatabaseIsDownWaitsAnswering503 starts `foldstream serve` on a
// PostgreSQL server of the test's own that is down: the node must not exit (a node and its
// database restarted together would crash-loop) but answer 503 UNAVAILABLE with Retry-After and
// log that it waits; once the database is started (and while it is still starting up) the node
// opens the store and serves by itself. With --db-wait run out, it exits with an error saying so.
func TestServeStartedWhileTheDatabaseIsDownWaitsAnswering503(t *testing.T) {
	pg := pgtest.StartServer(t)
	pg.Stop("fast")

	// A bounded wait that runs out.
	var stderr lockedBuffer
	err := commands["serve"].run(context.Background(), []string{"--addr", freeLoopbackAddr(t), "--db", pg.URL(), "--db-wait", "600ms"}, &lockedBuffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--db-wait") {
		t.Fatalf("serve with the database down past --db-wait: %v, want an error naming --db-wait", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeLoopbackAddr(t)
	var stdout lockedBuffer
	stderr = lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", addr, "--db", pg.URL(), "--db-wait", "60s"}, &stdout, &stderr)
	}()
	base := "http://" + addr + "/v1/stream/waiting"
	var res *http.Response
	var exited error
	exitedEarly := false
	// The node's listener opens in another goroutine.
	if !wait.For(20*time.Second, func() bool {
		if res, err = http.Get(base); err == nil {
			return true
		}
		select {
		case exited = <-done:
			exitedEarly = true
			return true
		default:
			return false
		}
	}) {
		t.Fatalf("the node never answered while waiting: %v\n%s", err, stderr.String())
	}
	if exitedEarly {
		t.Fatalf("serve exited while the database was down: %v\n%s", exited, stderr.String())
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Header.Get("Foldstream-Error-Code") != "UNAVAILABLE" ||
		res.Header.Get("X-Request-Id") == "" {
		t.Fatalf("while the database is down: %d, Retry-After %q, code %q, id %q; want 503 UNAVAILABLE with Retry-After and an X-Request-Id",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Foldstream-Error-Code"), res.Header.Get("X-Request-Id"))
	}
	if !stderr.holds("waiting for") {
		t.Fatalf("the node does not log that it waits for the database:\n%s", stderr.String())
	}

	pg.StartAsync() // the node may well see "the database system is starting up"
	// Retrying as a client told Retry-After would, faster.
	var wrong *http.Response
	if !wait.Every(60*time.Second, 50*time.Millisecond, func() bool {
		req, _ := http.NewRequest(http.MethodPut, base, strings.NewReader("hi"))
		req.Header.Set("Content-Type", "text/plain")
		var res *http.Response
		if res, err = http.DefaultClient.Do(req); err != nil {
			return false
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated && (res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "") {
			wrong = res
		}
		return res.StatusCode == http.StatusCreated || wrong != nil
	}) {
		t.Fatalf("the node never served after the database came back: %v\n%s\nserver log:\n%s", err, stderr.String(), pg.Log())
	}
	if wrong != nil {
		t.Fatalf("while the database starts: %d, want 201 or 503 with Retry-After", wrong.StatusCode)
	}
	if !stderr.holds("the database is back") {
		t.Fatalf("the node does not log that the database came back:\n%s", stderr.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not shut down")
	}
}
