package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/testsupport"
)

const opsToken = "opsman-token-0123456789abcdef"

type poisonTally struct {
	N int `json:"n"`
}

// poisoned counts "job" events; its ProcessEvent fails on a "poison" one while broken is set.
type poisoned struct {
	foldstream.Base[poisonTally]
	broken atomic.Bool
}

func (p *poisoned) Reduce(a foldstream.ReduceArgs[poisonTally]) (poisonTally, bool, error) {
	return poisonTally{N: a.State.N + 1}, true, nil
}

func (p *poisoned) ProcessEvent(a *foldstream.ProcessEventArgs[poisonTally]) error {
	if a.Event != nil && a.Event.Type == "poison" && p.broken.Load() {
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "the downstream refuses the poison")
	}
	return nil
}

// An operator's retry over HTTP: only an ops-scoped token may ask (read and read-write tokens get
// 403 FORBIDDEN, no token 401), and an ops token may not append. A processor that is not failing
// answers 409 CONFLICT. A failing one, fixed, recovers on POST ?op=retry at once — the store's
// clock never moves, so its backoff never came — and the server's log holds the audit line: who,
// what, on which processor, why.
func TestOpsTokenRetriesAFailingProcessorOverHTTP(t *testing.T) {
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	var logs syncBuffer
	_, h, ts := opsServer(t, clk, host.Config{ManualAlarms: true}, "carol", server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"},
	}))}
	p.broken.Store(true)
	if _, err := host.Register(ctx, h, "/work", p); err != nil {
		t.Fatal(err)
	}
	retry := ts.URL + "/v1/processor/jobs/work?op=retry&reason=downstream+fixed"

	res, body := request(t, "POST", retry, "")
	wantCoded(t, "retry without a token", res, body, http.StatusUnauthorized, foldtype.CodeUnauthorized)
	for _, tok := range []string{readerToken, writerToken} {
		res, body = request(t, "POST", retry, "", "Authorization", bearer(tok))
		wantCoded(t, "retry with token "+tok[:6], res, body, http.StatusForbidden, foldtype.CodeForbidden)
	}
	res, body = request(t, "POST", ts.URL+"/v1/stream/work", `{"type":"job"}`, "Content-Type", "application/json", "Authorization", bearer(opsToken))
	wantCoded(t, "append with the ops token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	res, body = request(t, "POST", retry, "", "Authorization", bearer(opsToken))
	wantCoded(t, "retry of a running processor", res, body, http.StatusConflict, foldtype.CodeConflict)
	res, body = request(t, "POST", ts.URL+"/v1/processor/jobs/work?op=explode", "", "Authorization", bearer(opsToken))
	wantCoded(t, "an unknown verb", res, body, http.StatusBadRequest, foldtype.CodeBadRequest)

	start := clk.Now()
	for _, typ := range []string{"job", "poison", "job"} {
		res, body := request(t, "POST", ts.URL+"/v1/stream/work", `{"type":"`+typ+`"}`, "Content-Type", "application/json", "Authorization", bearer(writerToken))
		if res.StatusCode/100 != 2 {
			t.Fatalf("append %s: %d %s", typ, res.StatusCode, body)
		}
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	// A plain read answers the last good state, marked; a wait answers the failure.
	res, body = request(t, "GET", ts.URL+"/v1/processor/jobs/work", "", "Authorization", bearer(opsToken))
	if res.StatusCode != http.StatusOK || res.Header.Get(server.HeaderProcessorState) != foldtype.StateFailing || !strings.Contains(body, `"n":1`) {
		t.Fatalf("read of the failing processor: %d %q %s, want 200 marked failing with the last good state (n 1)",
			res.StatusCode, res.Header.Get(server.HeaderProcessorState), body)
	}
	res, body = request(t, "GET", ts.URL+"/v1/processor/jobs/work?waitUntilProcessed=5&timeout=1s", "", "Authorization", bearer(opsToken))
	wantCoded(t, "wait on the failing processor", res, body, http.StatusServiceUnavailable, foldtype.CodeProcessorFailing)

	p.broken.Store(false)
	res, body = request(t, "POST", retry, "", "Authorization", bearer(opsToken))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"op":"retry"`) {
		t.Fatalf("retry with the ops token: %d %s", res.StatusCode, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, body = request(t, "GET", ts.URL+"/v1/processor/jobs/work?waitUntilProcessed=5&timeout=5s", "", "Authorization", bearer(opsToken))
		if res.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the processor did not recover after the retry: %d %s", res.StatusCode, body)
		}
	}
	if !strings.Contains(body, `"n":3`) {
		t.Fatalf("after the retry: %s, want 3 events reduced", body)
	}
	if !clk.Now().Equal(start) {
		t.Fatalf("the clock moved: %v", clk.Now().Sub(start))
	}
	audit := logs.String()
	for _, want := range []string{`msg="audit: processor retry"`, "actor=carol", "op=retry", "path=/work", "slug=jobs",
		`reason="downstream fixed"`, "outcome=done", "outcome=\"refused: CONFLICT\""} {
		if !strings.Contains(audit, want) {
			t.Fatalf("the audit lines lack %s:\n%s", want, audit)
		}
	}
}
