package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/testserver"
)

func TestLsListsStreamsUnderAPrefix(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, s := range []string{"carts/b", "carts/a", "orders", "carts/c"} {
		if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", s, `{"n":1}`); err != nil {
			t.Fatalf("append %s: %v", s, err)
		}
	}
	out, err := runCmd(t, ctx, "ls", "", "--server", base, "carts/")
	if err != nil {
		t.Fatalf("ls: %v", err)
	}
	if want := "/carts/a\n/carts/b\n/carts/c\n"; out != want {
		t.Errorf("ls carts/: got %q, want %q", out, want)
	}
	out, err = runCmd(t, ctx, "ls", "", "--server", base)
	if err != nil {
		t.Fatalf("ls: %v", err)
	}
	if want := "/carts/a\n/carts/b\n/carts/c\n/orders\n"; out != want {
		t.Errorf("ls: got %q, want %q", out, want)
	}
	out, err = runCmd(t, ctx, "ls", "", "-l", "--limit", "1", "--server", base, "/carts/")
	if err != nil {
		t.Fatalf("ls -l: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PATH") || !strings.Contains(lines[1], "/carts/a") ||
		!strings.Contains(lines[1], "application/json") || !strings.Contains(lines[1], "0000000000000000_0000000000000001") {
		t.Errorf("ls -l --limit 1: got %q, want a header and /carts/a with its type and tail", out)
	}
	if _, err := runCmd(t, ctx, "ls", "", "--server", base, "a", "b"); err == nil {
		t.Error("ls with two prefixes: no error")
	}
}
