package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

func listPage(t *testing.T, base, query string) server.StreamList {
	t.Helper()
	res, body := request(t, http.MethodGet, base+server.ListPath+"?"+query, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", server.ListPath, query, res.StatusCode, body)
	}
	wantHeader(t, "listing", res, "Content-Type", "application/json")
	var page server.StreamList
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("listing: %v: %s", err, body)
	}
	return page
}

func TestStreamListingPagesThroughAPrefixInPathOrder(t *testing.T) {
	e := setup(t, server.Config{})
	for _, p := range []string{"/carts/c", "/carts/a", "/orders", "/carts/e", "/carts/b", "/cartsx", "/carts/d"} {
		res, body := e.do(t, http.MethodPut, "/v1/stream"+p, map[string]string{"Content-Type": "application/json"}, "")
		wantStatus(t, "create "+p+" "+body, res, http.StatusCreated)
	}
	res, _ := e.do(t, http.MethodPost, "/v1/stream/carts/a", map[string]string{"Content-Type": "application/json"}, `[1,2,3]`)
	wantStatus(t, "append", res, http.StatusNoContent)
	res, _ = e.do(t, http.MethodPost, "/v1/stream/carts/b", map[string]string{"Stream-Closed": "true"}, "")
	wantStatus(t, "close", res, http.StatusNoContent)

	var got []string
	after := ""
	pages := 0
	for {
		q := url.Values{"prefix": {"/carts/"}, "limit": {"2"}}
		if after != "" {
			q.Set("after", after)
		}
		page := listPage(t, e.url, q.Encode())
		pages++
		for _, s := range page.Streams {
			got = append(got, s.Path)
			switch s.Path {
			case "/carts/a":
				if s.Tail != off(3) || s.ContentType != "application/json" || s.Closed {
					t.Errorf("/carts/a: %+v, want tail %s, application/json, open", s, off(3))
				}
				if s.CreatedAt != "2030-01-01T00:00:00.000Z" {
					t.Errorf("/carts/a created at %q, want the store clock's 2030-01-01T00:00:00.000Z", s.CreatedAt)
				}
			case "/carts/b":
				if !s.Closed {
					t.Errorf("/carts/b: %+v, want closed", s)
				}
			}
		}
		if page.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatalf("more pages than streams: %v", got)
		}
		after = page.Next
	}
	want := []string{"/carts/a", "/carts/b", "/carts/c", "/carts/d", "/carts/e"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if pages != 3 {
		t.Errorf("%d pages of 2 for 5 streams, want 3 (the last page has no next cursor)", pages)
	}
	if all := listPage(t, e.url, ""); len(all.Streams) != 7 || all.Next != "" {
		t.Errorf("listing everything: %d streams, next %q; want 7 and no next", len(all.Streams), all.Next)
	}
}

func TestStreamListingRefusesBadRequests(t *testing.T) {
	e := setup(t, server.Config{})
	for _, q := range []string{"limit=0", "limit=-1", "limit=x", "limit=1001", "prefix=%zz"} {
		res, body := e.do(t, http.MethodGet, server.ListPath+"?"+q, nil, "")
		wantStatus(t, "GET ?"+q+" "+body, res, http.StatusBadRequest)
	}
	for _, p := range []string{server.ListPath, server.InfoPath + "?path=/x"} {
		res, _ := e.do(t, http.MethodPost, p, nil, "")
		wantStatus(t, "POST "+p, res, http.StatusMethodNotAllowed)
	}
	res, _ := e.do(t, http.MethodGet, server.InfoPath+"?path=nope", nil, "")
	wantStatus(t, "info without a leading slash", res, http.StatusBadRequest)
	res, _ = e.do(t, http.MethodGet, server.InfoPath+"?path=/missing", nil, "")
	wantStatus(t, "info of a missing stream", res, http.StatusNotFound)
}

func TestStreamInfoReportsTheProcessorsOnTheStream(t *testing.T) {
	base, _ := setupProcessors(t)
	res, _ := httpDo(t, http.MethodPost, base+"/v1/stream/orders", "application/json", `{"type":"order.placed","payload":{"amount":5}}`)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("append: %d", res.StatusCode)
	}
	appended, _, err := server.ParseOffset(res.Header.Get("Stream-Next-Offset"))
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot route waits for the append to be folded; the status then shows it.
	if res, body := httpDo(t, http.MethodGet, base+"/v1/processor/totals/orders", "", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("snapshot: %d %s", res.StatusCode, body)
	}
	res, body := request(t, http.MethodGet, base+server.InfoPath+"?path=/orders", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("info: %d %s", res.StatusCode, body)
	}
	var d server.StreamDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	if d.Path != "/orders" || d.ContentType != "application/json" {
		t.Errorf("info %+v: want /orders, application/json", d.StreamEntry)
	}
	if len(d.Processors) != 1 {
		t.Fatalf("processors %+v, want the one totals", d.Processors)
	}
	p := d.Processors[0]
	if p.Slug != "totals" || p.Version != "1" || p.Offset < appended || p.Rev == 0 || p.Parked != nil {
		t.Errorf("status %+v: want totals v1 through offset >= %d with a live revision, not parked", p, appended)
	}
	res, body = request(t, http.MethodGet, base+server.InfoPath+"?path=/elsewhere", "")
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("info of a missing stream: %d %s", res.StatusCode, body)
	}
	// A stream without processors answers [] (a host is attached), not null.
	res, _ = httpDo(t, http.MethodPut, base+"/v1/stream/notes", "text/plain", "")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}
	_, body = request(t, http.MethodGet, base+server.InfoPath+"?path=/notes", "")
	if !strings.Contains(body, `"processors":[]`) {
		t.Errorf("info of a stream without processors: %s, want \"processors\":[]", body)
	}
}

func TestStreamInfoWithoutHostHasNoProcessors(t *testing.T) {
	e := setup(t, server.Config{})
	res, _ := e.do(t, http.MethodPut, "/v1/stream/notes", map[string]string{"Content-Type": "text/plain"}, "hi")
	wantStatus(t, "create", res, http.StatusCreated)
	res, body := e.do(t, http.MethodGet, server.InfoPath+"?path=/notes", nil, "")
	wantStatus(t, "info", res, http.StatusOK)
	if !strings.Contains(body, `"processors":null`) || !strings.Contains(body, `"tail":"`+off(2)+`"`) {
		t.Errorf("info: %s, want processors null and tail %s", body, off(2))
	}
}

func TestConsoleIsServedAtTheRoot(t *testing.T) {
	e := setup(t, server.Config{})
	res, body := e.do(t, http.MethodGet, "/", nil, "")
	wantStatus(t, "GET /", res, http.StatusOK)
	wantHeader(t, "GET /", res, "Content-Type", "text/html; charset=utf-8")
	if !strings.Contains(body, "console/app.js") {
		t.Errorf("GET /: not the console page: %.200s", body)
	}
	res, body = e.do(t, http.MethodGet, "/console/config.json", nil, "")
	wantStatus(t, "config", res, http.StatusOK)
	if strings.Contains(body, "processorPrefix") || !strings.Contains(body, `"listPath":"/v1/streams"`) {
		t.Errorf("config without a host: %s, want the listing and no processor prefix", body)
	}
	res, _ = e.do(t, http.MethodGet, "/console/livestate.js", nil, "")
	wantStatus(t, "livestate.js", res, http.StatusOK)
	wantHeader(t, "livestate.js", res, "Content-Type", "text/javascript; charset=utf-8")
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		res, _ = e.do(t, m, "/", nil, "")
		wantStatus(t, m+" /", res, http.StatusMethodNotAllowed)
	}

	off := setup(t, server.Config{DisableConsole: true})
	res, _ = off.do(t, http.MethodGet, "/", nil, "")
	wantStatus(t, "GET / with the console disabled", res, http.StatusNotFound)
	res, _ = off.do(t, http.MethodGet, server.ListPath, nil, "")
	wantStatus(t, "the listing with the console disabled", res, http.StatusOK)
}

func TestConsoleConfigNamesTheProcessorRoutesWithAHost(t *testing.T) {
	base, _ := setupProcessors(t)
	_, body := request(t, http.MethodGet, base+"/console/config.json", "")
	if !strings.Contains(body, `"processorPrefix":"/v1/processor/"`) {
		t.Errorf("config with a host: %s", body)
	}
}

// TestListingAndInfoNeedAReadToken: the listing and the stream information are reads like any
// other — a read-only token is enough, no token is refused — while the console's files, which
// hold no data, are served to anyone.
func TestListingAndInfoNeedAReadToken(t *testing.T) {
	s := setupSecured(t, server.Config{}, true)
	res, body := request(t, http.MethodPut, s.url+"/v1/stream/events", "", "Authorization", bearer(writerToken), "Content-Type", "application/json")
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	for _, p := range []string{server.ListPath, server.InfoPath + "?path=/events"} {
		res, body := request(t, http.MethodGet, s.url+p, "")
		wantCoded(t, "GET "+p+" without a token", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
		res, body = request(t, http.MethodGet, s.url+p, "", "Authorization", bearer("not-a-token-0123456789"))
		wantCoded(t, "GET "+p+" with an unknown token", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
		res, body = request(t, http.MethodGet, s.url+p, "", "Authorization", bearer(readerToken))
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with a read token: %d %s", p, res.StatusCode, body)
		}
	}
	for _, p := range []string{"/", "/console/app.js", "/console/livestate.js"} {
		res, _ := request(t, http.MethodGet, s.url+p, "")
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (no data in it)", p, res.StatusCode)
		}
	}
}

// TestListedProcessorStatusFollowsAppends: the status's offset moves with the processor.
func TestListedProcessorStatusFollowsAppends(t *testing.T) {
	_, h := setupProcessors(t)
	ctx := context.Background()
	before := h.ProcessorsOn(ctx, "/orders")
	if len(before) != 1 {
		t.Fatalf("ProcessorsOn: %+v", before)
	}
	evs, err := h.Store().Events().Stream("/orders").Append(ctx, foldtype.EventInput{Type: "order.placed", Payload: json.RawMessage(`{"amount":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/orders", "totals", evs[0].Offset, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	after := h.ProcessorsOn(ctx, "/orders")
	if after[0].Offset < evs[0].Offset || after[0].Rev <= before[0].Rev {
		t.Errorf("status after an append %+v, before %+v: want offset >= %d and a later revision", after[0], before[0], evs[0].Offset)
	}
	if got := h.ProcessorsOn(ctx, "/nothing"); got == nil || len(got) != 0 {
		t.Errorf("ProcessorsOn a stream without processors: %#v, want an empty slice", got)
	}
}
