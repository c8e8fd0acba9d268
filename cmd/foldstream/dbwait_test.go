package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err = http.Get(base)
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited while the database was down: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never answered while waiting: %v\n%s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // the node's listener opens in another goroutine
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Header.Get("Foldstream-Error-Code") != "UNAVAILABLE" ||
		res.Header.Get("X-Request-Id") == "" {
		t.Fatalf("while the database is down: %d, Retry-After %q, code %q, id %q; want 503 UNAVAILABLE with Retry-After and an X-Request-Id",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Foldstream-Error-Code"), res.Header.Get("X-Request-Id"))
	}
	if !strings.Contains(stderr.String(), "waiting for") {
		t.Fatalf("the node does not log that it waits for the database:\n%s", stderr.String())
	}

	pg.StartAsync() // the node may well see "the database system is starting up"
	for deadline := time.Now().Add(60 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodPut, base, strings.NewReader("hi"))
		req.Header.Set("Content-Type", "text/plain")
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusCreated {
				break
			}
			if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
				t.Fatalf("while the database starts: %d, want 201 or 503 with Retry-After", res.StatusCode)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never served after the database came back: %v\n%s\nserver log:\n%s", err, stderr.String(), pg.Log())
		}
		time.Sleep(50 * time.Millisecond) // retrying as a client told Retry-After would, faster
	}
	if !strings.Contains(stderr.String(), "the database is back") {
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
