package stream

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// TestSecondOpenInThisProcessIsRefused: while a store is open, opening its file again in the same
// process fails with STORE_LOCKED naming the file and this process; after Close it opens.
func TestSecondOpenInThisProcessIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	first, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, first, "/a", ev("x"))
	second, err := openStore(path, Config{Logger: quietLog})
	if err == nil {
		second.Close(context.Background())
		t.Fatal("second Open of an open store: got nil error, want STORE_LOCKED")
	}
	var fe *foldtype.Error
	if !errors.Is(err, foldtype.ErrStoreLocked) || !errors.As(err, &fe) || fe.Data["path"] != path || fe.Data["pid"] != os.Getpid() ||
		!strings.Contains(err.Error(), path) {
		t.Fatalf("second Open: got %v (%+v), want STORE_LOCKED naming %s and pid %d", err, fe, path, os.Getpid())
	}
	// The refused opener left the first store working: its SQLite locks are untouched.
	mustAppend(t, first, "/a", ev("y"))
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	defer again.Close(context.Background())
	if page := mustRead(t, again, "/a", 0, 10, readOptions{}); len(page.Events) != 2 {
		t.Fatalf("events after reopen: got %d, want 2", len(page.Events))
	}
}

// TestSecondOpenInAnotherProcessIsRefused: a store open in another process (this test binary,
// re-executed) makes Open fail with STORE_LOCKED naming that process; once it exits, Open works.
func TestSecondOpenInAnotherProcessIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	cmd, stdin := startChild(t, "TestHelperHoldStoreOpen", "FOLDSTREAM_HOLD_STORE="+path, "open")

	st, err := openStore(path, Config{Logger: quietLog})
	if err == nil {
		st.Close(context.Background())
		t.Fatal("Open of a store another process has open: got nil error, want STORE_LOCKED")
	}
	var fe *foldtype.Error
	if !errors.Is(err, foldtype.ErrStoreLocked) || !errors.As(err, &fe) || fe.Data["pid"] != cmd.Process.Pid ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Open: got %v, want STORE_LOCKED naming %s and pid %d", err, path, cmd.Process.Pid)
	}

	stdin.Close() // the child closes its store and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	st, err = openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatalf("Open after the other process exited: %v", err)
	}
	defer st.Close(context.Background())
	if page := mustRead(t, st, "/held", 0, 10, readOptions{}); len(page.Events) != 1 {
		t.Fatalf("events written by the other process: got %d, want 1", len(page.Events))
	}
}

// TestHelperHoldStoreOpen is the child of TestSecondOpenInAnotherProcessIsRefused: it opens the
// store named by FOLDSTREAM_HOLD_STORE, appends one event, says "open", and holds the store until
// its stdin closes.
func TestHelperHoldStoreOpen(t *testing.T) {
	path := os.Getenv("FOLDSTREAM_HOLD_STORE")
	if path == "" {
		t.Skip("helper process for TestSecondOpenInAnotherProcessIsRefused")
	}
	st, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, st, "/held", ev("x"))
	os.Stdout.WriteString("open\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // returns at EOF
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
