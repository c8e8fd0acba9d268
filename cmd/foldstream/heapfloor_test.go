package main

import (
	"context"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
)

// gcPercent is the GC percent in force.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// "foldstream serve" keeps a heap floor (32 MiB by default): while it serves with a small live
// heap, the GC percent after a collection is above GOGC's; --gc-heap-floor-mib 0 leaves GOGC's,
// and the percent is GOGC's again once serve has returned.
func TestServeKeepsAHeapFloorUnlessTurnedOff(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	for _, c := range []struct {
		args   []string
		raised bool
	}{
		{nil, true},
		{[]string{"--gc-heap-floor-mib", "0"}, false},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr lockedBuffer
		done := make(chan error, 1)
		args := append([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "serve.db")}, c.args...)
		go func() { done <- commands["serve"].run(ctx, args, &stdout, &stderr) }()
		if !wait.For(10*time.Second, func() bool { return strings.Contains(stdout.String(), "serving http://") }) {
			cancel()
			t.Fatalf("%v: server did not start: %s", c.args, stderr.String())
		}
		// The floor is raised from a GC's finalizer, after the collection: collect, then look on the
		// next tick.
		raised := wait.For(2*time.Second, func() bool {
			r := gcPercent() > 100
			runtime.GC()
			return r
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%v: serve: %v", c.args, err)
		}
		if raised != c.raised {
			t.Errorf("%v: GC percent raised above GOGC's while serving: %v, want %v", c.args, raised, c.raised)
		}
		if p := gcPercent(); p != 100 {
			t.Errorf("%v: GC percent %d after serve returned, want GOGC's 100", c.args, p)
		}
	}
}
