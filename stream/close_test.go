package stream

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
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
		if err := s.Close(context.Background()); err != nil {
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
		s.Close(context.Background())
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
	s, dir := openStoreWithOneEvent(t)
	mustRead(t, s, "/f", 0, 10, readOptions{})
	// The positive control: while the store is open, the detector sees its database file open
	// (else an empty answer after Close would prove nothing).
	if open := openFilesUnder(t, dir); !slices.Contains(open, filepath.Join(dir, "s.db")) {
		t.Fatalf("while the store is open, the files open under %s are %q, want s.db among them", dir, open)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, dir); len(open) != 0 {
		t.Fatalf("after Close these files are still open: %q", open)
	}
}

// Close bounds its wait with ctx: while a delivery into a subscriber is still running, a Close
// whose ctx ends returns ctx's error with intake already stopped (an append fails with CLOSED at
// once), the drain goes on, and a later Close returns once the delivery returned and the
// database closed.
func TestCloseReturnsWhenCtxEndsAndTheDrainGoesOn(t *testing.T) {
	t.Parallel()
	s, err := openStore(filepath.Join(t.TempDir(), "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sub, err := s.Events().Subscribe("/s", func(context.Context, []foldtype.Event, foldtype.ScannedRange) error {
		once.Do(func() { close(entered) })
		<-release
		return nil
	}, SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := s.Events().Stream("/s").Append(context.Background(), foldtype.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	<-entered // the delivery is running and holds the drain

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with an ended ctx during a delivery: %v, want context.Canceled", err)
	}
	if !s.Closed() {
		t.Error("Closed() is false after Close returned")
	}
	if _, err := s.Events().Stream("/s").Append(context.Background(), foldtype.EventInput{Type: "t"}); foldtype.CodeOf(err) != foldtype.CodeClosed {
		t.Errorf("append after Close: %v, want CLOSED", err)
	}
	close(release)
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseWaitsForReadsInFlight: Close does not close the database under a read transaction in
// flight (database/sql's Close does not wait for a connection being opened or used, and such a
// connection keeps or creates the store's files after Close returned): it reports still draining
// while the read runs, and once the read ends it returns with no file of the store open.
func TestCloseWaitsForReadsInFlight(t *testing.T) {
	t.Parallel()
	s, dir := openStoreWithOneEvent(t)
	entered, release, readDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		readDone <- s.k.Read(context.Background(), func(q driver.Reader) error {
			close(entered)
			<-release
			_, err := q.StreamByPath(context.Background(), "/f")
			return err
		})
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close during a read in flight: %v, want it still draining (context.DeadlineExceeded)", err)
	}
	close(release)
	if err := <-readDone; err != nil {
		t.Fatalf("the read in flight failed: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if open := openFilesUnder(t, dir); len(open) != 0 {
		t.Fatalf("after Close these files are still open: %q", open)
	}
}

// openStoreWithOneEvent opens a store in a directory of its own, with one event on stream /f, and
// returns it with the directory (which Close must leave with no file open).
func openStoreWithOneEvent(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := openStore(filepath.Join(dir, "s.db"), Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/f", ev("a"))
	return s, dir
}
