package host_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// releaseCounter is the PostgreSQL driver counting its lease releases: one at a time, and in groups.
type releaseCounter struct {
	*pgdriver.Driver
	single, groups, inGroups atomic.Int64
}

func (c *releaseCounter) ReleaseLease(ctx context.Context, l driver.Lease, idle bool) error {
	c.single.Add(1)
	return c.Driver.ReleaseLease(ctx, l, idle)
}

func (c *releaseCounter) ReleaseLeases(ctx context.Context, ls []driver.Lease, idle bool) error {
	c.groups.Add(1)
	c.inGroups.Add(int64(len(ls)))
	return c.Driver.ReleaseLeases(ctx, ls, idle)
}

// TestAShuttingDownNodeReleasesItsLeasesInGroups: Host.Shutdown on a shared database gives the node
// lease and every engine's lease up through driver.ReleaseLeases (one statement per group, the
// engines closed meanwhile together), not one statement per lease, and leaves every lease free
// for a takeover.
func TestAShuttingDownNodeReleasesItsLeasesInGroups(t *testing.T) {
	ctx := context.Background()
	d := pgDriver(t)
	c := &releaseCounter{Driver: d}
	s := storeOver(t, d, c, nil)
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := host.RegisterPattern[countState](ctx, h, "/t/*", newTicker(t, "tick")); err != nil {
		t.Fatal(err)
	}
	const engines = 12
	for i := range engines {
		p := fmt.Sprintf("/t/%d", i)
		if _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Snapshot(ctx, p, "tick"); err != nil { // opens the engine under its lease
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if n := c.single.Load(); n != 0 {
		t.Fatalf("%d leases released one statement each, want every one in a group", n)
	}
	if g, n := c.groups.Load(), c.inGroups.Load(); g == 0 || n != engines+1 {
		t.Fatalf("%d leases released in %d groups, want the node lease and %d engines' leases", n, g, engines)
	}
	live, err := d.Leases(ctx, driver.LeaseQuery{Prefix: "", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 0 {
		t.Fatalf("%d leases still live after the shutdown: %+v", len(live), live)
	}
	t.Logf("%d leases released in %d groups", c.inGroups.Load(), c.groups.Load())
}
