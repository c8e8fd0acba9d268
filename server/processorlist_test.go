package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

func processorList(t *testing.T, base, query string) server.ProcessorList {
	t.Helper()
	res, body := request(t, http.MethodGet, base+server.ProcessorsPath+"?"+query, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", server.ProcessorsPath, query, res.StatusCode, body)
	}
	var l server.ProcessorList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("processor list: %v: %s", err, body)
	}
	return l
}

func streamDetail(t *testing.T, base, path string) server.StreamDetail {
	t.Helper()
	res, body := request(t, http.MethodGet, base+server.InfoPath+"?path="+url.QueryEscape(path), "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("info %s: %d %s", path, res.StatusCode, body)
	}
	var d server.StreamDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// deltaWatcher counts ticks and also consumes the live-state deltas (ephemeral events), as a
// processor that follows another's live state does; a delta changes nothing.
type deltaWatcher struct{ foldstream.Base[tickCount] }

func (deltaWatcher) Reduce(a foldstream.ReduceArgs[tickCount]) (tickCount, bool, error) {
	if a.Event.Type != "tick" {
		return a.State, false, nil
	}
	return tickCount{Ticks: a.State.Ticks + 1}, true, nil
}

// TestAProcessorPastLiveStateDeltasIsShownAtTheDurableTail is the regression test of a processor
// listed "running@8" on a stream whose tail is 6: an engine's cursor also moves over the
// ephemeral events pushed to it (live-state deltas), which take offsets after the last durable
// event but are never stored. What the stream information and the processor listing show is
// never past the stream's tail, and a processor through every durable event has no lag.
func TestAProcessorPastLiveStateDeltasIsShownAtTheDurableTail(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet}))
	t.Cleanup(func() {
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	ctx := context.Background()
	c := foldstream.MustDefineContract(foldstream.ContractConfig[tickCount]{Slug: "watcher", Version: "1",
		Consumes: []string{"tick", foldtype.LiveStateChangedType}})
	if _, err := host.Register(ctx, h, "/ticks", deltaWatcher{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	var tail int64
	for range 3 {
		evs, err := st.Events().Stream("/ticks").Append(ctx, foldtype.EventInput{Type: "tick", Payload: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		tail = evs[0].Offset
		if err := h.WaitUntilProcessed(ctx, "/ticks", "watcher", tail, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The precondition: the host's own report is past the durable tail (the deltas took offsets).
	eventually(t, "the engine's cursor to pass the durable tail over the deltas", func() bool {
		st := h.ProcessorsOn(ctx, "/ticks")
		return len(st) == 1 && st[0].Offset > tail
	})
	d := streamDetail(t, ts.URL, "/ticks")
	if d.Tail != off(tail) || len(d.Processors) != 1 || d.Processors[0].Offset != tail {
		t.Errorf("info: tail %s, processors %+v; want the processor through offset %d, the tail", d.Tail, d.Processors, tail)
	}
	l := processorList(t, ts.URL, "")
	if len(l.Processors) != 1 {
		t.Fatalf("listing: %+v, want the one watcher", l.Processors)
	}
	if p := l.Processors[0]; p.Stream != "/ticks" || p.Slug != "watcher" || p.Offset != tail || p.Tail != off(tail) || p.Lag != 0 || p.LagEstimated || p.LagSeconds != 0 || p.OldestUnprocessed != nil {
		t.Errorf("listed %+v: want the watcher on /ticks through %d, the tail, with no lag", p, tail)
	}
}

// TestProcessorListingFiltersByStateAcrossStreams: GET /v1/processors lists the processors of
// every stream (exact and pattern registrations), each with its stream, tail and lag in durable
// events; ?state= keeps the processors in those states ("lagging": with durable events left to
// reduce); ?prefix, ?after and ?limit page through the streams in path order; a state it does not
// know is refused.
func TestProcessorListingFiltersByStateAcrossStreams(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet}))
	t.Cleanup(func() {
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	ctx := context.Background()
	if err := host.RegisterPattern(ctx, h, "/carts/*", newTickStep(t, "ticks", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/jobs/bad", newTickStep(t, "worker", func(int32) error { return errors.New("the worker's downstream refuses") })); err != nil {
		t.Fatal(err)
	}
	tick := func(path string) int64 {
		t.Helper()
		evs, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick", Payload: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Offset
	}
	for _, p := range []string{"/carts/a", "/carts/b"} {
		res, body := request(t, http.MethodPut, ts.URL+"/v1/stream"+p, "", "Content-Type", "application/json")
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", p, res.StatusCode, body)
		}
		at := tick(p)
		if err := h.WaitUntilProcessed(ctx, p, "ticks", at, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// An event the processor does not consume is no lag: its offset may stay before it (such an
	// event reaches it only inside its next push), with nothing left to do.
	if _, err := st.Events().Stream("/carts/a").Append(ctx, foldtype.EventInput{Type: "note", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if l := processorList(t, ts.URL, "prefix=/carts/a&state=lagging"); len(l.Processors) != 0 {
		t.Errorf("after an event it does not consume, /carts/a's processor is listed lagging: %+v", l.Processors)
	}
	first := tick("/jobs/bad")
	tick("/jobs/bad")
	badTail := tick("/jobs/bad")

	// The worker fails on its first tick, with two more behind it.
	var bad server.ProcessorEntry
	eventually(t, "the worker to fail", func() bool {
		for _, p := range processorList(t, ts.URL, "").Processors {
			if p.Slug == "worker" && p.State != foldtype.StateRunning && p.State != foldtype.StateCatchingUp {
				bad = p
				return true
			}
		}
		return false
	})
	if bad.Stream != "/jobs/bad" || bad.Offset >= first || bad.Tail != off(badTail) || bad.Lag != 3 || bad.LagEstimated || bad.LagUnknown || bad.OldestUnprocessed == nil {
		t.Errorf("the failing worker: %+v; want it on /jobs/bad before offset %d, tail %s, 3 durable events behind", bad, first, off(badTail))
	}

	all := processorList(t, ts.URL, "")
	var got []string
	for _, p := range all.Processors {
		got = append(got, p.Stream+" "+p.Slug)
		if p.Slug == "ticks" && (p.State != foldtype.StateRunning || p.Lag != 0 || p.Offset > position(t, p.Tail)) {
			t.Errorf("the healthy %s on %s: %+v; want running, not past its tail, with no lag", p.Slug, p.Stream, p)
		}
	}
	if want := []string{"/carts/a ticks", "/carts/b ticks", "/jobs/bad worker"}; !equalStrings(got, want) || all.Next != "" {
		t.Errorf("listing: %q next %q, want %q and no next page", got, all.Next, want)
	}

	for _, tc := range []struct {
		state string
		want  []string
	}{
		{bad.State, []string{"/jobs/bad worker"}},
		{"lagging", []string{"/jobs/bad worker"}},
		{"running", []string{"/carts/a ticks", "/carts/b ticks"}},
		{"running,lagging", []string{"/carts/a ticks", "/carts/b ticks", "/jobs/bad worker"}},
		{"idle", nil},
	} {
		var got []string
		for _, p := range processorList(t, ts.URL, url.Values{"state": {tc.state}}.Encode()).Processors {
			got = append(got, p.Stream+" "+p.Slug)
		}
		if !equalStrings(got, tc.want) {
			t.Errorf("state=%s: %q, want %q", tc.state, got, tc.want)
		}
	}

	page := processorList(t, ts.URL, "prefix=/carts/&limit=1")
	if len(page.Processors) != 1 || page.Processors[0].Stream != "/carts/a" || page.Next != "/carts/a" {
		t.Fatalf("first page of one stream: %+v next %q, want /carts/a and a next page", page.Processors, page.Next)
	}
	page = processorList(t, ts.URL, "prefix=/carts/&limit=1&after=/carts/a")
	if len(page.Processors) != 1 || page.Processors[0].Stream != "/carts/b" {
		t.Fatalf("second page: %+v next %q, want /carts/b", page.Processors, page.Next)
	}

	for _, q := range []string{"state=sleeping", "state=failing,,running", "limit=0", "limit=x"} {
		res, body := request(t, http.MethodGet, ts.URL+server.ProcessorsPath+"?"+q, "")
		wantCoded(t, "GET ?"+q, res, body, http.StatusBadRequest, foldtype.CodeBadRequest)
	}
}

func position(t *testing.T, offset string) int64 {
	t.Helper()
	pos, _, err := server.ParseOffset(offset)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
