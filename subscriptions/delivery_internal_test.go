package subscriptions

import (
	"testing"
)

// A commit pokes the delivery loop only when a subscription may need a pass: with none, the
// loop's pending "pass over all" waits for a subscription, and a commit must not wake it.
func TestCommitsWakeTheDeliveryLoopOnlyWithSubscriptions(t *testing.T) {
	d := newDelivery(DeliveryConfig{MaxWebhookConcurrency: 1})
	d.allDue = true // as start and every reload leave it
	pokes := func() int {
		n := len(d.signal)
		for len(d.signal) > 0 {
			<-d.signal
		}
		return n
	}
	d.changed("/a")
	d.changed("")
	if n := pokes(); n != 0 {
		t.Fatalf("commits without any subscription poked the delivery loop (%d pending)", n)
	}
	d.configs["s"] = Config{Type: Webhook, Pattern: "b/*"}
	d.changed("/a") // not matched, but the pass over all is still owed
	if n := pokes(); n != 1 {
		t.Fatalf("a commit with a subscription owed a pass: %d pokes, want 1", n)
	}
	d.allDue = false
	d.changed("/a")
	if n := pokes(); n != 0 {
		t.Fatal("a commit no subscription matches poked the delivery loop")
	}
	d.changed("/b/x")
	if n := pokes(); n != 1 || len(d.due["s"]) != 1 {
		t.Fatalf("a matching commit: %d pokes, due %v; want one poke and the path due", n, d.due)
	}
}
