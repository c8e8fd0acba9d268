package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// A stream's life from the CLI alone: create (twice: the same configuration is not an error),
// info in both forms, append, a fork that inherits the data, delete, and info on the deleted stream
// failing with the server's code.
func TestCreateInfoForkAndDeleteAStreamFromTheCLI(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("life-%d", time.Now().UnixNano())

	out, err := runCmd(t, ctx, "create", "", "--server", base, "--json", "--ttl", "1h", name)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var info streamInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("create --json printed %q: %v", out, err)
	}
	if !info.Created || info.ContentType != "application/json" || info.TTLSeconds != 3600 || info.Closed || info.NextOffset == "" {
		t.Errorf("create --json: %+v", info)
	}
	if out, err := runCmd(t, ctx, "create", "", "--server", base, "--ttl", "1h", name); err != nil || !strings.Contains(out, "content-type: application/json") {
		t.Errorf("create again with the same configuration: %v, printed %q", err, out)
	}
	if _, err := runCmd(t, ctx, "create", "", "--server", base, "--content-type", "text/plain", name); err == nil || !strings.Contains(err.Error(), "409") && !strings.Contains(strings.ToLower(err.Error()), "conflict") {
		t.Errorf("create again with another content type: %v, want a conflict", err)
	}

	if _, _, err := runAppendCmd(t, ctx, "", "--server", base, name, `{"n":1}`); err != nil {
		t.Fatalf("append: %v", err)
	}
	out, err = runCmd(t, ctx, "info", "", "--server", base, "--json", name)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	var after streamInfo
	if err := json.Unmarshal([]byte(out), &after); err != nil {
		t.Fatal(err)
	}
	if after.NextOffset == info.NextOffset || after.Created {
		t.Errorf("info after an append: %+v (before %+v)", after, info)
	}
	if out, err := runCmd(t, ctx, "info", "", "--server", base, name); err != nil || !strings.Contains(out, "next-offset:  "+after.NextOffset) {
		t.Errorf("info: %v, printed %q", err, out)
	}

	fork := name + "-fork"
	if _, err := runCmd(t, ctx, "create", "", "--server", base, "--fork-of", name, fork); err != nil {
		t.Fatalf("create --fork-of: %v", err)
	}
	if got := readAll(t, ctx, base, fork); got != "{\"n\":1}\n" {
		t.Errorf("the fork reads %q, want the source's message", got)
	}

	if out, err := runCmd(t, ctx, "delete", "", "--server", base, name); err != nil || !strings.HasPrefix(out, "deleted ") {
		t.Fatalf("delete: %v, printed %q", err, out)
	}
	if _, err := runCmd(t, ctx, "info", "", "--server", base, "--retries", "0", name); err == nil || !strings.Contains(err.Error(), "STREAM_GONE (410)") {
		t.Errorf("info of a deleted stream: %v, want STREAM_GONE (410)", err)
	}
}

// Flags a user gets wrong are refused before any request, with a message that says what to do.
func TestCreateRefusesConflictingOrMalformedExpiry(t *testing.T) {
	for _, args := range [][]string{
		{"--ttl", "1h", "--expires-at", "2030-01-02T15:04:05Z", "s"},
		{"--expires-at", "tomorrow", "s"},
		{"--ttl", "1500ms", "s"},
		{"a", "b"},
	} {
		if _, err := runCmd(t, t.Context(), "create", "", append([]string{"--server", "http://127.0.0.1:1"}, args...)...); err == nil {
			t.Errorf("create %v: no error", args)
		}
	}
}

// version prints the module's version and the Go release it was built with.
func TestVersionPrintsTheBuild(t *testing.T) {
	out, err := runCmd(t, t.Context(), "version", "")
	if err != nil || !strings.HasPrefix(out, "foldstream ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %v, printed %q", err, out)
	}
	out, err = runCmd(t, t.Context(), "version", "", "--json")
	var v map[string]any
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v["version"] == nil || v["go"] == nil {
		t.Fatalf("version --json: %v, printed %q", err, out)
	}
}
