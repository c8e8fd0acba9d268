//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitedriver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
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

// A cleanly closed store leaves no "<db>-lock" file behind, and the file can be opened again.
func TestCloseRemovesTheLockFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	ctx := context.Background()
	for range 2 {
		s, err := Open(ctx, Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path + lockSuffix); err != nil {
			t.Fatalf("while open: %v, want the lock file", err)
		}
		if _, err := Open(ctx, Config{Path: path}); foldtype.CodeOf(err) != foldtype.CodeStoreLocked {
			t.Fatalf("second Open while open: %v, want STORE_LOCKED", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path + lockSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after Close: %v, want no lock file", err)
		}
	}
}

// An opener whose lock landed on a lock file the previous holder removed meanwhile (it opened the
// file just before the removal) opens the name again, so it never holds a lock on a nameless file
// while another opener locks the new file of that name.
func TestLockOnARemovedLockFileIsTakenAgain(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	name := path + lockSuffix
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stale, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if err := os.Remove(name); err != nil { // the previous holder's Close
		t.Fatal(err)
	}
	if namedBy(stale, name) {
		t.Fatal("a removed lock file still counts as named")
	}
	f, err := lockStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if !namedBy(f, name) {
		t.Error("lockStore holds a file the name does not refer to")
	}
	if err := unlockStore(f); err != nil {
		t.Fatal(err)
	}
}
