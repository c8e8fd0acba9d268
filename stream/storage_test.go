package stream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// makeReadOnly makes path (a file or a directory) unwritable for this process until the test
// ends: permission bits for an ordinary user; the immutable attribute for root, whom permission
// bits do not stop (skipped where chattr is unavailable).
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o444)
		if fi.IsDir() {
			mode = 0o555
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(path, fi.Mode().Perm()) }) //nolint:errcheck // best effort before TempDir's removal
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("running as root and chattr +i is unavailable (%v: %s): cannot make %s read-only", err, out, path)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v: %s", path, err, out)
		}
	})
}

// TestOpenRefusesReadOnlyDatabase: an existing database file the process may not write, or one in
// a directory it may not write, is refused at Open with STORE_READ_ONLY naming the file — not
// opened to fail every write later.
func TestOpenRefusesReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"file", "directory", "new file in directory"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "s.db")
			if what != "new file in directory" {
				s, err := openStore(path, Config{Logger: quietLog})
				if err != nil {
					t.Fatal(err)
				}
				mustAppend(t, s, "/a", ev("x"))
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if what == "file" {
				makeReadOnly(t, path)
			} else {
				makeReadOnly(t, dir)
			}
			s, err := openStore(path, Config{Logger: quietLog})
			if err == nil {
				s.Close(context.Background())
				t.Fatal("Open: got nil error, want STORE_READ_ONLY")
			}
			if !errors.Is(err, foldtype.ErrStoreReadOnly) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: got %v, want STORE_READ_ONLY naming %s", err, path)
			}
		})
	}
}

// setMaxPages caps the database at n pages on the writer's connection; 0 means its current size
// plus extra pages.
func setMaxPages(t *testing.T, s *Store, extra int) {
	t.Helper()
	err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		var n int
		if err := txQueryRow(tx, `PRAGMA page_count`).Scan(&n); err != nil {
			return err
		}
		_, err := txExec(tx, fmt.Sprintf(`PRAGMA max_page_count = %d`, n+extra))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFullDiskRefusesWithInsufficientStorage: when the database cannot grow, appends of both
// views fail with INSUFFICIENT_STORAGE, every append that was acknowledged is kept, and once space
// returns the store takes writes again without a restart.
func TestFullDiskRefusesWithInsufficientStorage(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "/bytes", ContentType: "application/octet-stream"})
	mustAppend(t, s, "/ev", ev("first"))
	setMaxPages(t, s, 4)

	big := strings.Repeat("x", 3000)
	var mu sync.Mutex
	acked := 0
	var full error
	// Concurrent appenders share group commits, so the failure also hits writes grouped with the
	// one that ran out of space.
	for round := 0; full == nil && round < 200; round++ {
		var fns []func() error
		for range 4 {
			fns = append(fns, func() error {
				_, err := s.Events().Stream("/ev").Append(ctx, foldtype.EventInput{Type: "big", Payload: []byte(`"` + big + `"`)})
				if err == nil {
					mu.Lock()
					acked++
					mu.Unlock()
				}
				return err
			})
		}
		for _, err := range inOneGroup(t, s, fns...) {
			if err != nil && full == nil {
				full = err
			}
		}
	}
	if !errors.Is(full, foldtype.ErrInsufficientStorage) {
		t.Fatalf("append on a full database: got %v, want INSUFFICIENT_STORAGE", full)
	}
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/bytes", ContentType: "application/octet-stream", Body: []byte(big + big)}); !errors.Is(err, foldtype.ErrInsufficientStorage) {
		t.Fatalf("protocol append on a full database: got %v, want INSUFFICIENT_STORAGE", err)
	}

	setMaxPages(t, s, 1<<20) // space returns
	mustAppend(t, s, "/ev", ev("after"))
	mustAppendRecord(t, s, AppendRequest{Path: "/bytes", ContentType: "application/octet-stream", Body: []byte("ok")})

	page := mustRead(t, s, "/ev", 0, 1000, readOptions{})
	if got, want := len(page.Events), 1+acked+1; got != want {
		t.Fatalf("events after recovery: got %d, want %d (first, %d acknowledged, after)", got, want, acked)
	}
	for i, e := range page.Events {
		if e.Offset != int64(i+1) {
			t.Fatalf("event %d at offset %d: offsets must stay contiguous", i, e.Offset)
		}
	}
	if got := readAll(t, s, "/bytes"); got != "ok" {
		t.Fatalf("byte stream: got %q, want \"ok\"", got)
	}
}
