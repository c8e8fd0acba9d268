package server_test

import (
	"net/http"
	"testing"

	"github.com/foldstream/foldstream/subscriptions"
	"github.com/foldstream/foldstream/testsupport"
)

// TestACommitOnAnExplicitlyAddedStreamWakesItsSubscriptionAtOnce: a stream linked to a webhook
// subscription with POST …/streams (its pattern does not match it) wakes the subscription as soon
// as it is appended to, as a stream the pattern matches does. The delivery loop's clock never
// moves here, so its periodic poll never runs: before, such a commit marked nothing due, and the
// delivery waited for that poll (2 s).
func TestACommitOnAnExplicitlyAddedStreamWakesItsSubscriptionAtOnce(t *testing.T) {
	clock := testsupport.NewFakeClock()
	n := startNode(t, t.TempDir()+"/explicit.db", clock, subscriptions.DeliveryConfig{})
	rc := newReceiver(t, answerDone)
	putStream(t, n.url, "other/x", `{"n":0}`)
	putSub(t, n.url, "ex", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	res, b := request(t, "POST", n.url+"/v1/stream/__ds/subscriptions/ex/streams", `{"streams":["other/x"]}`, "Content-Type", "application/json")
	if res.StatusCode/100 != 2 {
		t.Fatalf("add streams: %d %s", res.StatusCode, b)
	}
	// The link starts at the stream's tail: nothing is pending until the next append.
	waitFor(t, "the link", func() bool {
		links, _ := getSub(t, n.url, "ex")["streams"].([]any)
		return len(links) == 1
	})
	select {
	case h := <-rc.got:
		t.Fatalf("a delivery before any append to the linked stream: %+v", h.payload)
	default:
	}
	res, b = request(t, "POST", n.url+"/v1/stream/other/x", `{"n":1}`, "Content-Type", "application/json")
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("append: %d %s", res.StatusCode, b)
	}
	h := rc.next(t)
	if len(h.payload.Streams) != 1 || h.payload.Streams[0].Path != "other/x" || !h.payload.Streams[0].HasPending {
		t.Fatalf("delivery %+v, want other/x pending", h.payload)
	}
}
