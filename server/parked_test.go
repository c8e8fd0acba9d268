package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// receipter emits one "receipt" per "order", keyed by the order's offset.
type receipter struct{ foldstream.Base[struct{}] }

func (p *receipter) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil {
		return nil
	}
	key := p.IdempotencyKey("receipt", a.Event)
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldtype.EventInput{Type: "receipt", IdempotencyKey: key,
			Payload: foldtype.JSON(map[string]int64{"order": a.Event.Offset})})
		return err
	})
	return nil
}

type orderTally struct {
	N int `json:"n"`
}

// orderCount counts orders.
type orderCount struct{ foldstream.Base[orderTally] }

func (orderCount) Reduce(a foldstream.ReduceArgs[orderTally]) (orderTally, bool, error) {
	return orderTally{N: a.State.N + 1}, true, nil
}

// serveReceipts opens the store at file, registers both processors on /o and serves them.
func serveReceipts(t *testing.T, file string) (string, *stream.Store, func()) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), file, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rc := foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{Slug: "receipts", Version: "1", Consumes: []string{"order"}, Emits: []string{"receipt"}})
	oc := foldstream.MustDefineContract(foldstream.ContractConfig[orderTally]{Slug: "orders", Version: "1", Consumes: []string{"order"}})
	if _, err := host.Register(ctx, h, "/o", &receipter{foldstream.NewBase(rc)}); err != nil {
		t.Fatalf("register receipts: %v", err)
	}
	if _, err := host.Register(ctx, h, "/o", orderCount{foldstream.NewBase(oc)}); err != nil {
		t.Fatalf("register orders: %v", err)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet}))
	return ts.URL, st, func() {
		ts.Close()
		_ = h.Shutdown(ctx)
		st.Close(context.Background())
	}
}

// TestParkedProcessorShowsOnItsRoute: a processor whose own emitted event conflicts (someone in
// process took its key with another body) is parked: its route answers 503 PROCESSOR_PARKED with
// the cause, the other processor's route and the stream routes keep serving, and a server
// restarted on the same file registers both and serves again — nothing fails at start.
func TestParkedProcessorShowsOnItsRoute(t *testing.T) {
	file := t.TempDir() + "/parked.db"
	url, st, stop := serveReceipts(t, file)
	ctx := context.Background()
	head, _ := request(t, "HEAD", url+"/v1/stream/o", "")
	tail := head.Header.Get("Stream-Next-Offset")
	next, _, err := server.ParseOffset(tail)
	if err != nil {
		t.Fatal(err)
	}
	squat := foldtype.EventInput{Type: "receipt", Payload: foldtype.JSON(map[string]string{"forged": "yes"}),
		IdempotencyKey: foldtype.ProcessorKeyPrefix + "receipts/receipt@" + itoa(int(next+2))}
	if _, err := st.Events().Stream("/o").Append(ctx, squat); err != nil {
		t.Fatal(err)
	}
	res, body := request(t, "POST", url+"/v1/stream/o", `{"type":"order"}`, "Content-Type", "application/json")
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("order: %d %s", res.StatusCode, body)
	}
	check := func(url string) {
		t.Helper()
		res, body := request(t, "GET", url+"/v1/processor/receipts/o?waitUntilProcessed="+itoa(int(next+2))+"&timeout=5s", "")
		wantCoded(t, "parked processor", res, body, http.StatusServiceUnavailable, foldtype.CodeProcessorParked)
		if !strings.Contains(strings.ToLower(body), "idempotency") || res.Header.Get("Retry-After") == "" {
			t.Fatalf("parked answer lacks its cause or Retry-After: %q %v", body, res.Header)
		}
		res, body = request(t, "GET", url+"/v1/processor/orders/o?waitUntilProcessed="+itoa(int(next+2))+"&timeout=5s", "")
		if res.StatusCode != http.StatusOK || !strings.Contains(body, `"state":{"n":1}`) {
			t.Fatalf("the other processor: %d %s", res.StatusCode, body)
		}
		if res, _ := request(t, "GET", url+"/v1/stream/o", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("stream route: %d", res.StatusCode)
		}
	}
	check(url)
	stop()
	url, _, stop = serveReceipts(t, file)
	defer stop()
	check(url)
}
