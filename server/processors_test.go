package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

type orderTotals struct {
	Count int     `json:"count"`
	Total float64 `json:"total"`
	Notes int     `json:"notes"`
}

// orderCounter reduces order.placed events and counts plain (non-event) messages.
type orderCounter struct{ foldstream.Base[orderTotals] }

func (orderCounter) Reduce(a foldstream.ReduceArgs[orderTotals]) (orderTotals, bool, error) {
	next := a.State
	switch a.Event.Type {
	case "order.placed":
		var p struct {
			Amount float64 `json:"amount"`
		}
		if err := json.Unmarshal(a.Event.Payload, &p); err != nil {
			return a.State, false, err
		}
		next.Count++
		next.Total += p.Amount
	case stream.MessageType:
		next.Notes++
	default:
		return a.State, false, nil
	}
	return next, true, nil
}

func setupProcessors(t *testing.T) (string, *host.Host) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[orderTotals]{
		Slug: "totals", Version: "1", Consumes: []string{"order.placed", stream.MessageType},
	})
	if _, err := host.Register(context.Background(), h, "/orders", orderCounter{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet, LongPollTimeout: 100 * time.Millisecond}))
	t.Cleanup(func() {
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	return ts.URL, h
}

func httpDo(t *testing.T, method, url, ctype, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestProcessorReducesHTTPWrittenStream: JSON messages POSTed over HTTP are events for processors
// (event-shaped objects as they are, other values as MessageType), event-level idempotency keys
// dedupe retries, and the snapshot route with waitUntilProcessed reads the writer's own writes.
func TestProcessorReducesHTTPWrittenStream(t *testing.T) {
	t.Parallel()
	base, _ := setupProcessors(t)
	res, _ := httpDo(t, "PUT", base+"/v1/stream/orders", "application/json", "")
	if res.StatusCode != 200 && res.StatusCode != 201 {
		t.Fatalf("create: status %d", res.StatusCode)
	}
	res, _ = httpDo(t, "POST", base+"/v1/stream/orders", "application/json",
		`[{"type":"order.placed","payload":{"amount":5},"idempotencyKey":"o1"},"just a note"]`)
	if res.StatusCode != 204 {
		t.Fatalf("append: status %d", res.StatusCode)
	}
	res, _ = httpDo(t, "POST", base+"/v1/stream/orders", "application/json",
		`{"type":"order.placed","payload":{"amount":5},"idempotencyKey":"o1"}`) // a retry
	if res.StatusCode != 204 {
		t.Fatalf("retry: status %d", res.StatusCode)
	}
	res, _ = httpDo(t, "POST", base+"/v1/stream/orders", "application/json",
		`{"type":"order.placed","payload":{"amount":2.5}}`)
	next := res.Header.Get("Stream-Next-Offset")

	res, body := httpDo(t, "GET", base+"/v1/processor/totals/orders?waitUntilProcessed="+next, "", "")
	if res.StatusCode != 200 {
		t.Fatalf("snapshot: status %d: %s", res.StatusCode, body)
	}
	var snap struct {
		Offset int64       `json:"offset"`
		State  orderTotals `json:"state"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if want := (orderTotals{Count: 2, Total: 7.5, Notes: 1}); snap.State != want {
		t.Fatalf("state: got %+v, want %+v", snap.State, want)
	}
	pos, _, _ := server.ParseOffset(next)
	if snap.Offset < pos {
		t.Fatalf("snapshot offset %d is behind the append's %d", snap.Offset, pos)
	}

	res, _ = httpDo(t, "GET", base+"/v1/processor/nope/orders", "", "")
	if res.StatusCode != 404 {
		t.Fatalf("unknown processor: status %d, want 404", res.StatusCode)
	}
	res, _ = httpDo(t, "GET", base+"/v1/processor/totals/orders?waitUntilProcessed=abc", "", "")
	if res.StatusCode != 400 {
		t.Fatalf("bad waitUntilProcessed: status %d, want 400", res.StatusCode)
	}
}

// TestLiveStateOverHTTP: a browser-style client seeds from the SSE route and applies deltas; its
// state always equals the processor's live state.
func TestLiveStateOverHTTP(t *testing.T) {
	t.Parallel()
	base, _ := setupProcessors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/processor/totals/orders?live=sse", nil)
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live SSE: status %d type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events := make(chan [2]string, 64)
	go func() {
		sc := bufio.NewScanner(res.Body)
		var ev, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data:"):
				data = strings.TrimPrefix(line, "data:")
			case line == "" && ev != "":
				events <- [2]string{ev, data}
				ev, data = "", ""
			}
		}
		close(events)
	}()

	var held json.RawMessage
	var rev int64
	apply := func(e [2]string) {
		switch e[0] {
		case "seed":
			var s struct {
				Rev   int64           `json:"rev"`
				State json.RawMessage `json:"state"`
			}
			if err := json.Unmarshal([]byte(e[1]), &s); err != nil {
				t.Fatalf("seed: %v", err)
			}
			held, rev = s.State, s.Rev
		case "delta":
			var d struct {
				From, To int64
				Patch    json.RawMessage
			}
			if err := json.Unmarshal([]byte(e[1]), &d); err != nil {
				t.Fatalf("delta: %v", err)
			}
			if d.From != rev {
				t.Fatalf("delta from %d, held rev %d", d.From, rev)
			}
			next, err := foldstream.ApplyPatch(held, d.Patch)
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			held, rev = next, d.To
		}
	}
	apply(<-events)
	for i := range 3 {
		r, _ := httpDo(t, "POST", base+"/v1/stream/orders", "application/json", `{"type":"order.placed","payload":{"amount":1}}`)
		if r.StatusCode != 204 {
			t.Fatalf("append %d: status %d", i, r.StatusCode)
		}
	}
	deadline := time.After(5 * time.Second)
	for {
		var st orderTotals
		if held != nil {
			_ = json.Unmarshal(held, &st)
		}
		if st.Count == 3 {
			break
		}
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("live SSE ended early")
			}
			apply(e)
		case <-deadline:
			t.Fatalf("held state %s never reached count 3", held)
		}
	}
	r, body := httpDo(t, "GET", base+"/v1/processor/totals/orders?view=live", "", "")
	if r.StatusCode != 200 {
		t.Fatalf("live seed: status %d", r.StatusCode)
	}
	var seed struct {
		Rev   int64       `json:"rev"`
		State orderTotals `json:"state"`
	}
	if err := json.Unmarshal([]byte(body), &seed); err != nil {
		t.Fatal(err)
	}
	if seed.State.Count != 3 || seed.Rev != rev {
		t.Fatalf("seed: got %+v, want count 3 at rev %d", seed, rev)
	}
}
