package pgdriver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// TestReleasingLeasesTogetherFreesEachHeldOneAndAnnouncesThemAll: a departing node releases its
// node lease and its processors' leases in one statement (driver.LeaseBatchReleaser). Every lease
// still held at its generation reads free for a takeover, one taken over meanwhile stays its new
// holder's, and the other node hears of every released key — 300 keys, more than one
// notification's payload holds.
func TestReleasingLeasesTogetherFreesEachHeldOneAndAnnouncesThemAll(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	stopListen, err := b.Listen(ctx, func(driver.Notification) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stopListen()
	got := make(chan string, 1000)
	defer b.WatchLeases(func(key, holder string) {
		if holder == "node-a" {
			got <- key
		}
	})()
	var held []driver.Lease
	for i := range 301 {
		key := fmt.Sprintf("processor\x1f/streams/with-a-longish-name/%04d\x1fcounter", i)
		if i == 0 {
			key = "node\x1fnode-a"
		}
		l, ok, err := a.AcquireLease(ctx, key, "node-a", "", time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		held = append(held, l)
	}
	// One lease changed hands before the release: it is not the releaser's to give up.
	moved := held[7]
	if _, err := pgtestExec(ctx, url, `UPDATE leases SET expires_at = 'epoch'::timestamptz + interval '1 second' WHERE key = $1`, moved.Key); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.AcquireLease(ctx, moved.Key, "node-b", "", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := a.ReleaseLeases(ctx, held, false); err != nil {
		t.Fatal(err)
	}
	ls, err := b.Leases(ctx, driver.LeaseQuery{Prefix: ""})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		switch {
		case l.Key == moved.Key:
			if !l.Live || l.Holder != "node-b" {
				t.Fatalf("the lease taken over: %+v, want node-b's and live", l)
			}
		case l.Live || l.Idle:
			t.Fatalf("lease %q after the release: live %v idle %v, want free for a takeover", l.Key, l.Live, l.Idle)
		}
	}
	var heard []string
	deadline := time.After(10 * time.Second)
	for len(heard) < len(held)-1 {
		select {
		case k := <-got:
			heard = append(heard, k)
		case <-deadline:
			t.Fatalf("the other node heard of %d releases, want %d", len(heard), len(held)-1)
		}
	}
	slices.Sort(heard)
	if slices.Contains(heard, moved.Key) || heard[0] != "node\x1fnode-a" || !strings.HasPrefix(heard[len(heard)-1], "processor\x1f") {
		t.Fatalf("announced %d keys from %q to %q (the moved one included: %v)", len(heard), heard[0], heard[len(heard)-1], slices.Contains(heard, moved.Key))
	}
}

// pgtestExec runs one statement on the test schema of url.
func pgtestExec(ctx context.Context, url, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}
