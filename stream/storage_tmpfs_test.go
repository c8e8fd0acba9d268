//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// nearlyFullTmpfs mounts a 1 MiB tmpfs on a temporary directory (root only; the test is skipped
// where it cannot mount), unmounted when the test ends, and fills a quarter of it with the file
// filler, which a test removes to free space.
func nearlyFullTmpfs(t *testing.T) (dir, filler string) {
	t.Helper()
	dir = t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v)", err)
	}
	t.Cleanup(func() {
		err := syscall.Unmount(dir, 0)
		if errors.Is(err, syscall.EBUSY) {
			// A process another test started (a re-executed test binary) may still hold a
			// descriptor it inherited while this store's files were open: detach the mount now,
			// and the kernel frees it once that process is gone.
			err = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		if err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	filler = filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, filler
}

// TestFullFilesystemRefusesWithInsufficientStorage runs the store on a real, tiny tmpfs (root
// only; skipped elsewhere): when the file system is full, appends fail with INSUFFICIENT_STORAGE,
// every acknowledged append survives, and once space is freed the same store takes writes again.
func TestFullFilesystemRefusesWithInsufficientStorage(t *testing.T) {
	t.Parallel()
	dir, filler := nearlyFullTmpfs(t)
	s, err := openStore(filepath.Join(dir, "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) }) // before the unmount (cleanups run last first)
	ctx := context.Background()
	payload := []byte(`"` + strings.Repeat("x", 4000) + `"`)
	acked := 0
	var full error
	for i := 0; i < 1000 && full == nil; i++ {
		if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "big", Payload: payload}); err != nil {
			full = err
			break
		}
		acked++
	}
	if !errors.Is(full, foldtype.ErrInsufficientStorage) {
		t.Fatalf("append on a full file system after %d: got %v, want INSUFFICIENT_STORAGE", acked, full)
	}
	if err := os.Remove(filler); err != nil { // space returns
		t.Fatal(err)
	}
	mustAppend(t, s, "/f", ev("after"))
	n, after := 0, int64(0)
	for {
		page := mustRead(t, s, "/f", after, 1000, readOptions{})
		n += len(page.Events)
		if len(page.Events) == 0 || page.AtHead {
			break
		}
		after = page.Events[len(page.Events)-1].Offset
	}
	if n != acked+1 {
		t.Fatalf("events after recovery: got %d, want %d acknowledged + 1", n, acked)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Concurrent plain creates (one savepointless INSERT each, many per group commit) on a full file
// system: they fail with INSUFFICIENT_STORAGE, every acknowledged create survives, no refused
// one left a row, and once space is freed the same store creates again.
func TestFullFilesystemRefusesCreatesAndKeepsTheAcknowledged(t *testing.T) {
	t.Parallel()
	dir, filler := nearlyFullTmpfs(t)
	s, err := openStore(filepath.Join(dir, "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	var mu sync.Mutex
	acked := map[string]bool{}
	var refused []string
	var other error
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				p := fmt.Sprintf("/full/%d/%d/%s", g, i, strings.Repeat("p", 200))
				_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: p, ContentType: "application/json"})
				mu.Lock()
				switch {
				case err == nil:
					acked[p] = true
				case errors.Is(err, foldtype.ErrInsufficientStorage):
					refused = append(refused, p)
				default:
					if other == nil {
						other = err
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if other != nil {
		t.Fatalf("a create failed otherwise than INSUFFICIENT_STORAGE: %v", other)
	}
	if len(refused) == 0 {
		t.Fatalf("%d creates on a 1 MiB file system and none refused", len(acked))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/after", ContentType: "application/json"})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = openStore(filepath.Join(dir, "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path LIKE '/full/%'`); n != len(acked) {
		t.Fatalf("%d rows after reopening, want the %d acknowledged creates", n, len(acked))
	}
	for p := range acked {
		if _, err := s.Protocol().HeadStream(ctx, p); err != nil {
			t.Fatalf("acknowledged %s: %v", p, err)
		}
	}
	for _, p := range refused {
		if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path = ?`, p); n != 0 {
			t.Fatalf("refused create %s left a row", p[:12])
		}
	}
}
