package host_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// owner returns the node whose /v1/streams/info lists the counter on path as running there.
func owner(ctx context.Context, t *testing.T, nodes []*node, path string) *node {
	t.Helper()
	var found *node
	if !wait.Every(30*time.Second, 50*time.Millisecond, func() bool { // polling other processes
		for _, nd := range nodes {
			var d struct {
				Processors []foldtype.ProcessorStatus `json:"processors"`
			}
			if err := getJSON(ctx, http.DefaultClient, nd.url()+"/v1/streams/info?path="+url.QueryEscape(path), &d); err != nil {
				t.Fatal(err)
			}
			for _, p := range d.Processors {
				if p.Slug == "counter" && p.Local && p.Owner != "" {
					found = nd
					return true
				}
			}
		}
		return false
	}) {
		t.Fatalf("no node runs the counter on %s", path)
	}
	return found
}

func send(ctx context.Context, t *testing.T, method, u string, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, u, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d", method, u, resp.StatusCode)
	}
}

// TestClusterStreamDeletedAndCreatedAgainThroughAnotherNodeRestartsItsProcessor: the rule of
// docs/store.md#deleting-a-stream across nodes. The counter runs on one node; the stream is
// deleted and created again through the other; the new stream's counter starts from the initial
// state, read through either node.
func TestClusterStreamDeletedAndCreatedAgainThroughAnotherNodeRestartsItsProcessor(t *testing.T) {
	db := pgtest.URL(t)
	nodes := startNodes(t, db, 2, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const path = "/counters/d"
	send(ctx, t, http.MethodPut, nodes[0].url()+"/v1/stream"+path, "")
	for i := range 3 {
		send(ctx, t, http.MethodPost, nodes[0].url()+"/v1/stream"+path, fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, i))
	}
	var snap struct {
		State struct{ Ticks int } `json:"state"`
	}
	if err := getJSON(ctx, http.DefaultClient, nodes[0].url()+"/v1/processor/counter"+path, &snap); err != nil || snap.State.Ticks != 3 {
		t.Fatalf("before the delete: %+v %v, want 3 ticks", snap, err)
	}
	own := owner(ctx, t, nodes, path)
	other := nodes[0]
	if own == nodes[0] {
		other = nodes[1]
	}
	send(ctx, t, http.MethodDelete, other.url()+"/v1/stream"+path, "")
	send(ctx, t, http.MethodPut, other.url()+"/v1/stream"+path, "")
	send(ctx, t, http.MethodPost, other.url()+"/v1/stream"+path, `{"type":"ticked","payload":{"by":1,"n":0}}`)
	for _, nd := range []*node{own, other} {
		// The new stream's first commit reaches the owner by notification.
		var err error
		if !wait.Every(30*time.Second, 50*time.Millisecond, func() bool {
			err = getJSON(ctx, http.DefaultClient, nd.url()+"/v1/processor/counter"+path, &snap)
			return err == nil && snap.State.Ticks == 1
		}) {
			t.Fatalf("after the stream was created again, through %s: %+v %v, want 1 tick from the initial state\n%s", nd.addr, snap, err, allLogs(nodes))
		}
	}
}
