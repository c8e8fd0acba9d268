package stream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/testsupport"
)

// unreachableOnceDriver is the PostgreSQL driver whose listener hands notifications on without
// their records, so another node's commit makes this node's feed read the database, and whose
// next read fails as an unreachable database's does once failNext is set.
type unreachableOnceDriver struct {
	*pgdriver.Driver
	failNext *atomic.Bool
	failed   chan struct{}
}

func (d unreachableOnceDriver) Listen(ctx context.Context, fn func(driver.Notification)) (func(), error) {
	return d.Driver.Listen(ctx, func(n driver.Notification) {
		n.Records = nil
		fn(n)
	})
}

func (d unreachableOnceDriver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	if d.failNext.CompareAndSwap(true, false) {
		d.failed <- struct{}{}
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "stream: the database is unavailable")
	}
	return d.Driver.Read(ctx, fn)
}

// A shared stream's listener gets another node's commit even when the feed's catch-up read of it
// failed (the database restarting) and no later commit or notification comes: the catch-up is
// retried on the store's clock until it reads.
func TestSharedFeedRetriesAFailedCatchUpUntilItsListenerHasTheRecords(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	clock := testsupport.NewFakeClock()
	dd := unreachableOnceDriver{Driver: d, failNext: new(atomic.Bool), failed: make(chan struct{}, 1)}
	a, err := stream.OpenDriver(ctx, dd, stream.Config{Logger: quiet, Clock: clock})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	b := openPG(t, url)

	if _, err := b.Events().Stream("/retry").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(0)}); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	sub, err := a.Events().Subscribe("/retry", col.deliver, stream.SubscribeOptions{Consumes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	dd.failNext.Store(true)
	if _, err := b.Events().Stream("/retry").Append(ctx, foldtype.EventInput{Type: "t", Payload: foldtype.JSON(1)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dd.failed:
	case <-time.After(30 * time.Second):
		t.Fatal("the feed never read the other node's commit")
	}
	// No append follows: only the retry brings the record. Time moves on the store's clock until
	// it has (each step past the longest backoff), bounded by a real deadline.
	deadline := time.After(30 * time.Second)
	for {
		col.mu.Lock()
		n := len(col.events)
		col.mu.Unlock()
		if n >= 1 {
			break
		}
		clock.Advance(5 * time.Second)
		select {
		case <-col.got:
		case <-time.After(20 * time.Millisecond): // polling: the retry is armed just after the failure
		case <-deadline:
			t.Fatalf("the listener got no record after the failed catch-up (pending timers: %v)", clock.Pending())
		}
	}
	evs := col.waitFor(t, 1)
	if got, want := evs[0].Offset, int64(2); got != want {
		t.Fatalf("record offset = %d, want %d", got, want)
	}
}
