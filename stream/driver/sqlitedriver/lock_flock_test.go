//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitedriver

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCloseReleasesTheLockWhileADuplicateDescriptorLives: Close releases the store's lock before it
// returns even when another descriptor still refers to the lock file. A child process forked by any
// goroutine (exec.Command) holds a copy of every descriptor until it execs, so a lock that is only
// released by closing our descriptor would outlive Close for that moment and refuse a reopen with
// "already open in this process". A dup of the descriptor stands in for that child here.
func TestCloseReleasesTheLockWhileADuplicateDescriptorLives(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if s.lock == nil {
		t.Skip("no lock file on this platform")
	}
	dup, err := syscall.Dup(int(s.lock.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup) //nolint:errcheck // test cleanup
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("Open right after Close: %v", err)
	}
	again.Close()
}
