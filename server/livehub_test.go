package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// liveFollower is a client of a processor's live-state SSE route: it holds the state it was
// seeded with and applies each delta, failing on a delta that does not start at its revision.
type liveFollower struct {
	states chan orderTotals // the held state after every seed and delta
	errs   chan error
	deltas int // deltas applied, read after states is drained
}

func followLive(ctx context.Context, t *testing.T, url string) *liveFollower {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("live SSE %s: status %d", url, res.StatusCode)
	}
	f := &liveFollower{states: make(chan orderTotals, 256), errs: make(chan error, 1)}
	go func() {
		defer res.Body.Close()
		var held json.RawMessage
		var rev int64
		var ev string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
				continue
			}
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			var err error
			switch ev {
			case "seed":
				var s struct {
					Rev   int64           `json:"rev"`
					State json.RawMessage `json:"state"`
				}
				err = json.Unmarshal([]byte(data), &s)
				held, rev = s.State, s.Rev
			case "delta":
				var d struct {
					From, To int64
					Patch    json.RawMessage
				}
				if err = json.Unmarshal([]byte(data), &d); err == nil && d.From != rev {
					err = fmt.Errorf("delta from %d while holding rev %d", d.From, rev)
				}
				if err == nil {
					held, err = foldstream.ApplyPatch(held, d.Patch)
					rev = d.To
					f.deltas++
				}
			}
			var st orderTotals
			if err == nil {
				err = json.Unmarshal(held, &st)
			}
			if err != nil {
				f.errs <- err
				return
			}
			f.states <- st
		}
	}()
	return f
}

// waitCount waits until the follower holds a state with count n.
func (f *liveFollower) waitCount(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case st := <-f.states:
			if st.Count == n {
				return
			}
		case err := <-f.errs:
			t.Fatalf("%s: %v", name, err)
		case <-deadline:
			t.Fatalf("%s never held count %d", name, n)
		}
	}
}

// TestLiveStateReadersOfAStreamShareOneDeltaPath: the SSE readers of two processors on one stream,
// joining at different times, each follow their own processor's chain (seed, then deltas from the
// seed's revision) through one delta hub for the stream, which goes away with its last reader.
func TestLiveStateReadersOfAStreamShareOneDeltaPath(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storeopen.Open(ctx, ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Shutdown(context.Background()) }()
	for _, slug := range []string{"totals", "second"} {
		c := foldstream.MustDefineContract(foldstream.ContractConfig[orderTotals]{Slug: slug, Version: "1", Consumes: []string{"order.placed"}})
		if _, err := host.Register(ctx, h, "/orders", orderCounter{foldstream.NewBase(c)}); err != nil {
			t.Fatal(err)
		}
	}
	srv := newServer(t, st, server.Config{Processors: h, Logger: quiet, LongPollTimeout: time.Hour})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	place := func() {
		t.Helper()
		if r, _ := httpDo(t, "POST", ts.URL+"/v1/stream/orders", "application/json", `{"type":"order.placed","payload":{"amount":1}}`); r.StatusCode != 204 {
			t.Fatalf("append: status %d", r.StatusCode)
		}
	}
	place() // the stream exists, count 1
	rctx, stopReading := context.WithCancel(ctx)
	var followers []*liveFollower
	var names []string
	for i := range 6 {
		slug := []string{"totals", "second"}[i%2]
		f := followLive(rctx, t, ts.URL+"/v1/processor/"+slug+"/orders?live=sse")
		f.waitCount(t, fmt.Sprintf("reader %d (%s) seed", i, slug), i+1)
		followers, names = append(followers, f), append(names, fmt.Sprintf("reader %d (%s)", i, slug))
		place()
		for j, f := range followers {
			f.waitCount(t, names[j], i+2)
		}
	}
	if n := srv.LiveHubs(); n != 1 {
		t.Errorf("delta hubs with six readers of one stream: %d, want 1", n)
	}
	for i, f := range followers {
		if f.deltas == 0 {
			t.Errorf("%s followed by seeds only", names[i])
		}
	}
	stopReading()
	if !wait.For(10*time.Second, func() bool { return srv.LiveHubs() == 0 }) {
		t.Fatalf("delta hubs after every reader left: %d, want 0", srv.LiveHubs())
	}
}
