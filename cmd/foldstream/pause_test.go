package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// S-08 from the command line: pause refuses appends with the reason, ls -l shows it, resume lets
// appends through again.
func TestPauseAndResumeFromTheCommandLine(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", "orders", `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	if _, err := runCmd(t, ctx, "pause", "", "--server", base, "--reason", "disk swap", "orders"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	_, err := runCmd(t, ctx, "append", "", "--server", base, "orders", `{"n":2}`)
	if !errors.Is(err, client.ErrStreamPaused) || !strings.Contains(err.Error(), "stream paused: disk swap") {
		t.Fatalf("append to a paused stream: got %v, want STREAM_PAUSED with the reason", err)
	}
	out, err := runCmd(t, ctx, "ls", "", "-l", "--server", base)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], "PAUSED") ||
		!strings.HasSuffix(lines[1], "paused: disk swap") {
		t.Fatalf("ls -l: got %q, want the pause reason in the last column", out)
	}
	if _, err := runCmd(t, ctx, "resume", "", "--server", base, "orders"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	out, err = runCmd(t, ctx, "append", "", "--server", base, "orders", `{"n":2}`)
	if err != nil || strings.TrimSpace(out) != "0000000000000000_0000000000000004" {
		t.Fatalf("append after resume: got %q %v, want the tail after pause, resume and the message", out, err)
	}
	if out, _ := runCmd(t, ctx, "ls", "", "-l", "--server", base); strings.Contains(out, "paused:") {
		t.Fatalf("ls -l after resume: %q", out)
	}
	if _, err := runCmd(t, ctx, "pause", "", "--server", base); err == nil {
		t.Fatal("pause without a stream: no error")
	}
}
