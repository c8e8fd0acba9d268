package powercut_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/freeport"
	"github.com/foldstream/foldstream/internal/harness/history"
	"github.com/foldstream/foldstream/internal/harness/powercut"
)

var (
	buildOnce sync.Once
	serverBin string
	buildErr  error
)

func foldstreamBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "powercut-bin-")
		if err != nil {
			buildErr = err
			return
		}
		serverBin, buildErr = history.BuildServer(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return serverBin
}

// serverCuts runs `foldstream serve` on a power-cut mount under HTTP clients (plain appenders,
// idempotent producers, catch-up and long-poll readers), cuts the power and SIGKILLs the server
// cuts times, each time starting it again on what the disk kept, and returns the history judged
// by the linearizability checker. lie(i) makes the i-th mount's disk lie about fsync.
func serverCuts(t *testing.T, cuts int, lie func(i int) bool) history.Result {
	t.Helper()
	base := t.TempDir() // before the server: cleanups run last first, so the mount ends before its directory goes
	srv, err := powercut.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	node := &history.Node{Bin: foldstreamBin(t), Addr: addr, Args: []string{"--long-poll-timeout", "1s"}}
	survivors := ""
	var pfs *powercut.Remote
	start := func(i int) {
		t.Helper()
		dir := filepath.Join(base, strconv.Itoa(i))
		mnt, backing := filepath.Join(dir, "mnt"), filepath.Join(dir, "backing")
		for _, d := range []string{mnt, backing, filepath.Join(dir, "survivors")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if pfs, err = srv.Mount(mnt, backing, powercut.Options{Initial: survivors, LieAboutFsync: lie(i)}); err != nil {
			msg := "FUSE is not usable on this machine (needs /dev/fuse, fusermount3 from Debian's fuse3 or root): " + err.Error()
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		node.DB = filepath.Join(mnt, dbName)
		ctx, cancel := context.WithTimeout(context.Background(), history.StartTimeout)
		defer cancel()
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start(0)
	t.Cleanup(func() {
		node.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", node.Logs())
		}
	})

	w := &history.Workload{Targets: []string{node.URL()}, Prefix: "p", Streams: 2, Writers: 2, Producers: 1, Readers: 2,
		Timeout: 3 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Create(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(lctx) }()
	t.Cleanup(func() { stop(); <-done })
	acked := func() int { return history.CountOf(w.Rec.Operations()).Acknowledged }
	progress := func(what string, n int) {
		t.Helper()
		want := acked() + n
		deadline := time.After(60 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for acked() < want {
			select {
			case <-deadline:
				t.Fatalf("waited 60 s for %s (%v)", what, history.CountOf(w.Rec.Operations()))
			case <-tick.C:
			}
		}
	}

	for i := range cuts {
		progress("appends before the cut", 30)
		dst := filepath.Join(base, strconv.Itoa(i), "survivors")
		if _, err := pfs.Cut(dst, alternate(i), uint64(i)); err != nil {
			t.Fatal(err)
		}
		// The power took the server down with the disk.
		if !node.Kill() {
			t.Fatalf("cut %d: the server was not running at the cut", i)
		}
		if err := pfs.Unmount(); err != nil {
			t.Fatal(err)
		}
		survivors = dst
		start(i + 1)
	}
	progress("appends after the last restart", 30)
	stop()
	<-done
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	if err := w.FinalReads(fctx); err != nil {
		t.Fatal(err)
	}
	r := history.Check(w.Rec.Operations(), 60*time.Second, os.TempDir())
	t.Logf("%d power cuts of a server: history %v: %v", cuts, r.Counts, r.Verdict)
	return r
}

// TestAServerLosesNoAcknowledgedAppendAtAPowerCut: a `foldstream serve` process on a power-cut
// mount (synchronous=FULL, the default) has the power cut under HTTP load three times; after each
// it starts on what the disk kept. The linearizability checker judges every client's history: no
// acknowledged append lost or duplicated, no read that goes back after a restart.
func TestAServerLosesNoAcknowledgedAppendAtAPowerCut(t *testing.T) {
	r := serverCuts(t, 3, func(int) bool { return false })
	switch r.Verdict {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("the history is not linearizable (rendered at %s):\n%s", r.Visualization, r.Explanation)
	default:
		t.Errorf("the checker ran out of time on %v", r.Counts)
	}
}

// TestTheHistoryCheckerSeesAServerLosingAppendsOnADiskThatLiesAboutFsync is the positive control
// of the server's test: the same run whose second disk lies about fsync must be judged illegal.
func TestTheHistoryCheckerSeesAServerLosingAppendsOnADiskThatLiesAboutFsync(t *testing.T) {
	r := serverCuts(t, 2, func(i int) bool { return i == 1 })
	if r.Verdict != porcupine.Illegal {
		t.Fatalf("a server on a disk that lies about fsync lost no acknowledged append at the cut: %v, %v", r.Verdict, r.Counts)
	}
}
