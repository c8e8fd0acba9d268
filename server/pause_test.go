package server_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/refserver"
	"github.com/foldstream/foldstream/server"
)

const pauseBody = `{"type":"events.iterate.com/stream/paused","payload":{"reason":"disk swap, 10 min"}}`

// S-08 over HTTP: a writer pauses with a POST of the control event; appends are answered 423
// STREAM_PAUSED with the reason (docs/server.md#paused-streams); HEAD, the stream information and
// the listing show the state; a reader cannot pause; the resume lands.
func TestPausedStreamAnswers423AndShowsItsState(t *testing.T) {
	s := setupSecured(t, server.Config{}, true)
	u := s.url + "/v1/stream/orders"
	w := []string{"Authorization", bearer(writerToken), "Content-Type", "application/json"}
	if res, body := request(t, "PUT", u, "", w...); res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	res, body := request(t, "POST", u, pauseBody, "Authorization", bearer(readerToken), "Content-Type", "application/json")
	wantCoded(t, "pause with a read token", res, body, 403, foldtype.CodeForbidden)
	if res, body := request(t, "POST", u, pauseBody, w...); res.StatusCode != 204 && res.StatusCode != 200 {
		t.Fatalf("pause: %d %s", res.StatusCode, body)
	}
	res, body = request(t, "POST", u, `{"n":1}`, w...)
	wantCoded(t, "append to a paused stream", res, body, 423, foldtype.CodeStreamPaused)
	if wantProblem(t, "append to a paused stream", res, body).Detail != "stream paused: disk swap, 10 min" || res.Header.Get(server.HeaderPaused) != "true" {
		t.Fatalf("refusal: %q, headers %v", body, res.Header)
	}
	res, _ = request(t, "HEAD", u, "", "Authorization", bearer(readerToken))
	if reason, err := url.PathUnescape(res.Header.Get(server.HeaderPauseReason)); res.Header.Get(server.HeaderPaused) != "true" || err != nil || reason != "disk swap, 10 min" {
		t.Fatalf("HEAD of a paused stream: %v", res.Header)
	}
	_, body = request(t, "GET", s.url+server.InfoPath+"?path=/orders", "", "Authorization", bearer(readerToken))
	var info server.StreamDetail
	if err := json.Unmarshal([]byte(body), &info); err != nil || !info.Paused || info.PauseReason != "disk swap, 10 min" {
		t.Fatalf("stream information: %s (%v)", body, err)
	}
	if res, body := request(t, "POST", u, `{"type":"events.iterate.com/stream/resumed"}`, w...); res.StatusCode >= 300 {
		t.Fatalf("resume: %d %s", res.StatusCode, body)
	}
	res, _ = request(t, "HEAD", u, "", "Authorization", bearer(readerToken))
	if res.Header.Get(server.HeaderPaused) != "" {
		t.Fatalf("HEAD after the resume: %v", res.Header)
	}
	_, body = request(t, "GET", s.url+server.ListPath, "", "Authorization", bearer(readerToken))
	if !strings.Contains(body, `"paused":false`) {
		t.Fatalf("listing after the resume: %s", body)
	}
	if res, body := request(t, "POST", u, `{"n":1}`, w...); res.StatusCode >= 300 {
		t.Fatalf("append after the resume: %d %s", res.StatusCode, body)
	}
}

// S-08 with the official TypeScript client: both a plain append and an idempotent producer get a
// clear error carrying the reason, and neither retries the refusal.
func TestTypeScriptClientGetsClearErrorOnPausedStream(t *testing.T) {
	base, _ := serveFile(t, server.Config{})
	u := base + "/v1/stream/paused"
	mustDo(t, "PUT", u, map[string]string{"Content-Type": "application/json"}, nil, 201)
	mustDo(t, "POST", u, map[string]string{"Content-Type": "application/json"}, []byte(pauseBody), 204)

	out := refserver.RunScript(t, "ts-paused.mjs", u)
	type outcome struct {
		Status  int    `json:"status"`
		Details string `json:"details"`
	}
	var got struct {
		Append   *outcome `json:"append"`
		Producer *outcome `json:"producer"`
		Requests int      `json:"requests"`
		TimedOut bool     `json:"timedOut"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	if got.TimedOut {
		t.Fatalf("the TypeScript client was still retrying after 10 s (%d requests)", got.Requests)
	}
	for what, o := range map[string]*outcome{"append": got.Append, "producer": got.Producer} {
		if o == nil || o.Status != 423 || !strings.Contains(o.Details, "stream paused: disk swap, 10 min") {
			t.Errorf("%s: got %+v, want status 423 with the reason", what, o)
		}
	}
	if got.Requests != 2 {
		t.Errorf("requests: %d, want 2 (one per append, no retries)", got.Requests)
	}
}
