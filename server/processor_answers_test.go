package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// A processor route has one answer past the end of the stream: it waits the whole timeout, then
// 504 PROCESS_TIMEOUT with the processor's offset — every time, never a 503 or a message naming
// another bound.
func TestProcessorWaitPastTheEndAnswers504WithItsOffset(t *testing.T) {
	t.Parallel()
	base, _ := setupProcessors(t)
	if res, body := httpDo(t, http.MethodPost, base+"/v1/stream/orders", "application/json", `{"type":"order.placed","payload":{"amount":1}}`); res.StatusCode/100 != 2 {
		t.Fatalf("append: %d %s", res.StatusCode, body)
	}
	for i := range 4 {
		start := time.Now()
		res, body := httpDo(t, http.MethodGet, base+"/v1/processor/totals/orders?waitUntilProcessed=999&timeout=300ms", "", "")
		wantCoded(t, "wait past the end", res, body, http.StatusGatewayTimeout, foldtype.CodeProcessTimeout)
		if got := time.Since(start); got < 300*time.Millisecond {
			t.Fatalf("try %d: answered after %v, before the 300ms timeout", i, got)
		}
		if off := res.Header.Get(server.HeaderProcessorOffset); off == "" {
			t.Fatalf("try %d: no %s header (body %s)", i, server.HeaderProcessorOffset, body)
		}
	}
}

// A snapshot covers every append that returned before the request, whatever the processor
// consumes: its offset is at least the last append's, even when the processor consumes none of
// the later events.
func TestProcessorSnapshotCoversEveryReturnedAppend(t *testing.T) {
	t.Parallel()
	base, h := setupProcessors(t)
	httpDo(t, http.MethodPost, base+"/v1/stream/orders", "application/json", `{"type":"order.placed","payload":{"amount":2}}`)
	if _, err := h.Snapshot(t.Context(), "/orders", "totals"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, body := httpDo(t, http.MethodPost, base+"/v1/stream/orders", "application/json", `{"type":"not.consumed"}`); res.StatusCode/100 != 2 {
			t.Fatalf("append: %d %s", res.StatusCode, body)
		}
	}
	info, err := h.Store().Protocol().HeadStream(t.Context(), "/orders")
	if err != nil {
		t.Fatal(err)
	}
	res, body := httpDo(t, http.MethodGet, base+"/v1/processor/totals/orders", "", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("snapshot: %d %s", res.StatusCode, body)
	}
	var snap struct {
		Offset int64 `json:"offset"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Offset < info.Tail {
		t.Fatalf("snapshot offset %d, want at least %d (the last append's)", snap.Offset, info.Tail)
	}
}

// A processor route on a stream that does not exist answers 404 STREAM_NOT_FOUND, whether or not
// a processor is registered on that path.
func TestProcessorRouteOnAMissingStreamIsStreamNotFound(t *testing.T) {
	t.Parallel()
	base, _ := setupProcessors(t)
	for _, route := range []string{"/v1/processor/totals/absent", "/v1/processor/nope/absent"} {
		res, body := httpDo(t, http.MethodGet, base+route, "", "")
		wantCoded(t, route, res, body, http.StatusNotFound, foldtype.CodeStreamNotFound)
	}
}

// A failing processor's routes answer 503 PROCESSOR_FAILING with the failure in the body and a
// Retry-After until the host's next retry.
func TestFailingProcessorRouteAnswers503WithTheReason(t *testing.T) {
	t.Parallel()
	failing := foldtype.NewError(foldtype.CodeProcessorFailing, map[string]any{"offset": int64(4), "attempts": 2,
		"nextRetry": time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339Nano)},
		"host: processor \"p\" on \"/orders\" is failing at offset 4 (PROCESS_EVENT_FAILED: panic: boom)")
	url := serveStuck(t, stuckProcessors{err: failing})
	res, body := request(t, "GET", url+"/v1/processor/p/orders", "")
	wantCoded(t, "failing", res, body, http.StatusServiceUnavailable, foldtype.CodeProcessorFailing)
	if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 20 || ra > 30 {
		t.Fatalf("Retry-After %q, want the seconds until the next retry (30 at most)", res.Header.Get("Retry-After"))
	}
	if !strings.Contains(body, "failing at offset 4") {
		t.Fatalf("body %q does not say what fails where", body)
	}
}

// A read on a node that lost the processor's lease meanwhile answers 503 LEASE_LOST with a
// Retry-After (the node that holds the lease now answers the next try), not 500 INTERNAL.
func TestALostLeaseAnswers503WithRetryAfter(t *testing.T) {
	t.Parallel()
	lost := foldtype.NewError(foldtype.CodeLeaseLost, map[string]any{"lease": "p\x00/orders", "generation": 3},
		"host: the lease of processor \"p\" on \"/orders\" moved on: retry")
	url := serveStuck(t, stuckProcessors{err: lost})
	for _, route := range []string{"/v1/processor/p/orders", "/v1/processor/p/orders?view=live", "/v1/processor/p/orders?waitUntilProcessed=1"} {
		res, body := request(t, "GET", url+route, "")
		wantCoded(t, route, res, body, http.StatusServiceUnavailable, foldtype.CodeLeaseLost)
		if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("%s: Retry-After %q, want whole seconds", route, res.Header.Get("Retry-After"))
		}
	}
}
