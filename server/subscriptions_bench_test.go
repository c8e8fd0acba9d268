package server_test

import (
	"net/http"
	"testing"

	"github.com/foldstream/foldstream/subscriptions"
)

// BenchmarkWebhookWakeRoundTrip measures one wake end to end on loopback: an append to a
// subscribed stream, the signed webhook it causes, and the synchronous done that acks it (the
// next append waits for the ack, so each iteration is one whole wake).
func BenchmarkWebhookWakeRoundTrip(b *testing.B) {
	n := startNode(b, b.TempDir()+"/bench.db", nil, subscriptions.DeliveryConfig{})
	rc := newReceiver(b, answerDone)
	putSub(b, n.url, "bench", `{"type":"webhook","streams":["events/a"],"webhook":{"url":"`+rc.url+`"}}`)
	putStream(b, n.url, "events/a", `[]`)
	b.ResetTimer()
	for range b.N {
		res, body := request(b, "POST", n.url+"/v1/stream/events/a", `{"n":1}`, "Content-Type", "application/json")
		if res.StatusCode != http.StatusNoContent && res.StatusCode != http.StatusOK {
			b.Fatalf("append: %d %s", res.StatusCode, body)
		}
		rc.next(b)
	}
}
