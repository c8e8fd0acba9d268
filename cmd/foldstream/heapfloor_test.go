package main

import (
	"context"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
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
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "serving http://"); {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("%v: server did not start: %s", c.args, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		raised := false
		for deadline := time.Now().Add(2 * time.Second); !raised && time.Now().Before(deadline); {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
			raised = gcPercent() > 100
		}
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
