package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// A refused connection fails the command promptly, with one progress line per retry and the
// error printed once.
func TestCLIFailsPromptlyWhenTheServerRefusesConnections(t *testing.T) {
	base := refusedServer(t)
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(context.Background(), []string{"append", "--server", base, "orders", `{"n":1}`}, &out, &errOut)
	took := time.Since(start)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr %q", code, errOut.String())
	}
	// The default policy's two backoffs are 50–100 ms and 100–200 ms: far below the bound, which
	// only guards against the old 10-attempt policy (tens of seconds).
	if took > 5*time.Second {
		t.Errorf("took %v to give up", took)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "retry 1 of 2") || !strings.Contains(lines[1], "retry 2 of 2") ||
		!strings.Contains(lines[2], "connection refused") {
		t.Fatalf("stderr:\n%s\nwant two retry lines and one error", errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"read", "--retries", "0", "--server", base, "orders"}, &out, &errOut); code != 1 || strings.Contains(errOut.String(), "retry") {
		t.Fatalf("--retries 0: exit %d, stderr %q; want a failure without retries", code, errOut.String())
	}
}

// An unknown flag is reported once (by the flag package, with the usage), exit status 2.
func TestCLIReportsAnUnknownFlagOnce(t *testing.T) {
	for _, cmd := range []string{"append", "read", "tail"} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{cmd, "--no-such-flag", "orders"}, &out, &errOut)
		if n := strings.Count(errOut.String(), "no-such-flag"); code != 2 || n != 1 {
			t.Errorf("%s: exit %d, %d mentions of the flag in:\n%s", cmd, code, n, errOut.String())
		}
	}
}

// Appending nothing names the CLI flag that closes a stream, not a Go API.
func TestCLIAppendOfEmptyInputNamesTheCloseFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	stdin = strings.NewReader("")
	code := run(context.Background(), []string{"append", "--server", refusedServer(t), "--content-type", "text/plain", "orders"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "--close") || strings.Contains(errOut.String(), "use Close") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}
