package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/testsupport"
)

// skip, the parked list, redrive and discard over HTTP, with an ops token: a skip of a running
// processor is 409; of a failing one it answers the parked event, which ?parked=1 lists in the
// shape the console reads; a redrive while the cause stands answers 503 PROCESSOR_FAILING and
// leaves it parked; after the fix it answers the offsets it ran; discard of an offset not parked
// is 409, of one without an offset 400. Every verb is in the audit.
func TestSkipParkedRedriveAndDiscardOverHTTP(t *testing.T) {
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	_, h, ts := opsServer(t, clk, host.Config{ManualAlarms: true}, "carol", server.Config{Metrics: server.NewMetrics()})
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"},
	}))}
	p.broken.Store(true)
	if _, err := host.Register(ctx, h, "/work", p); err != nil {
		t.Fatal(err)
	}
	base := ts.URL + "/v1/processor/jobs/work"
	ops := func(method, url string) (*http.Response, string) {
		return request(t, method, url, "", "Authorization", bearer(opsToken))
	}

	res, body := request(t, "GET", base+"?parked=1", "", "Authorization", bearer(readerToken))
	wantCoded(t, "parked with a read token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	res, body = ops("GET", base+"?parked=1")
	if res.StatusCode != http.StatusOK || strings.TrimSpace(body) != `{"parked":[]}` {
		t.Fatalf("parked of a healthy processor: %d %s", res.StatusCode, body)
	}
	res, body = ops("POST", base+"?op=skip")
	wantCoded(t, "skip of a running processor", res, body, http.StatusConflict, foldtype.CodeConflict)
	res, body = ops("POST", base+"?op=discard")
	wantCoded(t, "discard without an offset", res, body, http.StatusBadRequest, foldtype.CodeBadRequest)

	start := clk.Now()
	for _, typ := range []string{"job", "poison", "job"} {
		res, body := request(t, "POST", ts.URL+"/v1/stream/work", `{"type":"`+typ+`"}`, "Content-Type", "application/json", "Authorization", bearer(writerToken))
		if res.StatusCode/100 != 2 {
			t.Fatalf("append %s: %d %s", typ, res.StatusCode, body)
		}
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))

	res, body = ops("POST", base+"?op=skip&reason=downstream+rejects+it")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("skip: %d %s", res.StatusCode, body)
	}
	var skipped struct {
		Op     string               `json:"op"`
		Parked foldtype.ParkedEvent `json:"parked"`
	}
	if err := json.Unmarshal([]byte(body), &skipped); err != nil || skipped.Op != "skip" || skipped.Parked.Type != "poison" ||
		skipped.Parked.By != "carol" || skipped.Parked.Reason != "downstream rejects it" || skipped.Parked.Code != string(foldtype.CodeUnavailable) {
		t.Fatalf("skip's answer: %s (%v)", body, err)
	}
	poison := strconv.FormatInt(skipped.Parked.Offset, 10)
	res, body = ops("GET", base+"?waitUntilProcessed=5&timeout=5s")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"n":2`) {
		t.Fatalf("after the skip: %d %s, want the two jobs reduced and the poison set aside", res.StatusCode, body)
	}

	// The list, in the shape the console reads.
	res, body = ops("GET", base+"?parked=1")
	var list struct {
		Parked []map[string]any `json:"parked"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || res.StatusCode != http.StatusOK || len(list.Parked) != 1 {
		t.Fatalf("parked: %d %s (%v)", res.StatusCode, body, err)
	}
	for _, k := range []string{"offset", "type", "code", "message", "attempts", "node", "at", "by", "reason"} {
		if _, ok := list.Parked[0][k]; !ok {
			t.Fatalf("a parked event lacks %q: %s", k, body)
		}
	}
	if at, _ := list.Parked[0]["at"].(string); at == "" {
		t.Fatalf("at: %s", body)
	} else if _, err := time.Parse(time.RFC3339, at); err != nil {
		t.Fatalf("at is not RFC 3339: %s", at)
	}

	if _, text := ops("GET", ts.URL+server.MetricsPath); !strings.Contains(text, `foldstream_processor_parked_events{slug="jobs"} 1`) {
		t.Fatalf("metrics with one event parked lack the gauge at 1:\n%s", text)
	}
	res, body = ops("POST", base+"?op=redrive")
	wantCoded(t, "redrive while the cause stands", res, body, http.StatusServiceUnavailable, foldtype.CodeProcessorFailing)
	if _, body = ops("GET", base+"?parked=1"); !strings.Contains(body, `"attempts":2`) {
		t.Fatalf("after a failed redrive: %s, want it parked with 2 attempts", body)
	}
	p.broken.Store(false)
	res, body = ops("POST", base+"?op=redrive&reason=fixed")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"redriven":[`+poison+`]`) {
		t.Fatalf("redrive: %d %s", res.StatusCode, body)
	}
	if _, body = ops("GET", base+"?parked=1"); strings.TrimSpace(body) != `{"parked":[]}` {
		t.Fatalf("after the redrive: %s", body)
	}
	if _, text := ops("GET", ts.URL+server.MetricsPath); !strings.Contains(text, `foldstream_processor_parked_events{slug="jobs"} 0`) {
		t.Fatalf("metrics after the redrive lack the gauge at 0:\n%s", text)
	}
	res, body = ops("GET", base)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"n":3`) {
		t.Fatalf("state after the redrive: %d %s", res.StatusCode, body)
	}
	res, body = ops("POST", base+"?op=discard&offset="+poison)
	wantCoded(t, "discard of an event not parked", res, body, http.StatusConflict, foldtype.CodeConflict)

	audit, err := h.Audit(ctx, "/work", "jobs", 20)
	if err != nil {
		t.Fatal(err)
	}
	var ops2 []string
	for _, a := range audit {
		ops2 = append(ops2, a.Op+" "+a.Outcome)
	}
	got := strings.Join(ops2, ", ")
	for _, want := range []string{"skip done", "redrive done", "redrive refused: PROCESSOR_FAILING", "discard refused: CONFLICT", "skip refused: CONFLICT"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the audit lacks %q: %s", want, got)
		}
	}
}
