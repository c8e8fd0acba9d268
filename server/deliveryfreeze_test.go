package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/subscriptions"
	"github.com/foldstream/foldstream/testsupport"
)

// TestANodeWokenPastItsDeliveryLeaseSendsNoWebhookUntilItRenewedIt: on a shared database the
// subscription-delivery lease can pass to another node while its holder is frozen (a GC pause,
// a stopped VM). The holder, woken, used to go on stepping subscriptions and sending webhooks
// until its next renewal — beside the node that took delivery over, so a webhook could be sent
// twice. It now checks the lease's local deadline (its own monotonic clock, from when the renewal
// was sent) before each pass and each attempt, sends nothing past it, and delivers again once it
// has renewed the lease.
func TestANodeWokenPastItsDeliveryLeaseSendsNoWebhookUntilItRenewedIt(t *testing.T) {
	dsn := pgtest.URL(t)
	clock := testsupport.NewFakeClock()
	const ttl = 10 * time.Minute
	a := startNode(t, dsn, clock, subscriptions.DeliveryConfig{NodeID: "node-a", LeaseTTL: ttl})
	rc := newReceiver(t, answerDone)
	putSub(t, a.url, "frozen", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	waitFor(t, "node-a to take the delivery lease", func() bool {
		var n int
		_ = a.st.Driver().(*pgdriver.Driver).Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM leases WHERE key = '__ds/subscriptions' AND holder = 'node-a'`).Scan(&n)
		return n == 1
	})
	putStream(t, a.url, "events/before", `{"n":1}`)
	if h := rc.next(t); h.payload.WakeID == "" {
		t.Fatal("positive control: no delivery before the freeze")
	}

	// The node wakes from a freeze longer than its lease: nothing is sent for a new stream.
	a.shiftDeliveryClock(2 * ttl)
	putStream(t, a.url, "events/during", `{"n":1}`)
	quiet := time.NewTimer(time.Second) // long enough for a pass and an attempt on this machine
	select {
	case h := <-rc.got:
		t.Fatalf("a node past its delivery lease's local deadline sent wake %s (%s)", h.payload.WakeID, h.raw)
	case <-quiet.C:
	}

	// Its loop renews the lease when due (the store's clock reaches the renewal) and delivers.
	clock.Advance(ttl / 3)
	h := driveUntilDelivered(t, clock, rc)
	if string(h.raw) == "" {
		t.Fatal("no delivery after the renewal")
	}
}
