package stream

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// TestCloseWithWritesInFlight: closing a store while writers keep appending is race-free (run it
// with -race), every append either is acknowledged or fails with CLOSED, none hangs, and every
// acknowledged append is in the file when it is opened again.
func TestCloseWithWritesInFlight(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	var total int64 // acknowledged over all rounds
	for round := range 5 {
		s, err := openStoreSync(path, sqlitedriver.SyncNormal, Config{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		var acked atomic.Int64
		var wg sync.WaitGroup
		started := make(chan struct{})
		var once sync.Once
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := s.Events().Stream("/s").Append(context.Background(), foldtype.EventInput{Type: "t"})
					if err != nil {
						if foldtype.CodeOf(err) != foldtype.CodeClosed {
							t.Errorf("round %d writer %d: append failed with %v, want CLOSED", round, w, err)
						}
						return
					}
					acked.Add(1)
					if i == 2 {
						once.Do(func() { close(started) })
					}
				}
			}()
		}
		<-started
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		s, err = openStore(path, Config{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		n, after := 0, int64(0)
		for {
			page := mustRead(t, s, "/s", after, 1000, readOptions{})
			n += len(page.Events)
			if len(page.Events) == 0 || page.AtHead {
				break
			}
			after = page.Events[len(page.Events)-1].Offset
		}
		s.Close()
		total += acked.Load()
		if int64(n) != total {
			t.Fatalf("round %d: %d events in the file, %d were acknowledged", round, n, total)
		}
		t.Logf("round %d: %d acknowledged", round, acked.Load())
	}
}

// openFilesUnder lists this process's open files under dir (Linux: /proc/self/fd).
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list open files here: %v", err)
	}
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			out = append(out, target)
		}
	}
	return out
}

// TestCloseReleasesTheDatabaseFiles: after Close the process holds no file of the store open (the
// writer's connection included), so a closed store leaks no descriptors and its file system can
// be unmounted.
func TestCloseReleasesTheDatabaseFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openStore(filepath.Join(dir, "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/f", ev("a"))
	mustRead(t, s, "/f", 0, 10, readOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, dir); len(open) != 0 {
		t.Fatalf("after Close these files are still open: %q", open)
	}
}
