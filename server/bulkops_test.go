package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// A bulk pause over a path pattern: the dry run counts the streams it would touch and changes
// nothing; the pause pauses the processor on exactly the matching streams (a stream outside the
// pattern keeps running), a second dry run counts none left to pause, and the bulk resume lets
// every one catch up with what was appended meanwhile.
func TestABulkPauseOverAPatternCountsFirstThenPausesOnlyTheMatchingStreams(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(ctx, filepath.Join(t.TempDir(), "bulk.db"), storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"},
	}))}
	if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
		t.Fatal(err)
	}
	if err := host.RegisterPattern(ctx, h, "/other/*", p); err != nil {
		t.Fatal(err)
	}
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Processors: h, Authorize: bt.Authorize, Logger: quiet})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	paths := []string{"/carts/a", "/carts/b", "/carts/c", "/other/x"}
	for _, path := range paths {
		if _, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
			t.Fatal(err)
		}
	}
	bulk := func(op string, dry bool) foldtype.BulkResult {
		t.Helper()
		u := ts.URL + "/v1/processor/jobs/?op=" + op + "&pattern=/carts/*&reason=bulk"
		if dry {
			u += "&dryRun=1"
		}
		res, body := request(t, "POST", u, "", "Authorization", bearer(opsToken))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s (dry run %v): %d %s", op, dry, res.StatusCode, body)
		}
		var br foldtype.BulkResult
		if err := json.Unmarshal([]byte(body), &br); err != nil {
			t.Fatal(err)
		}
		return br
	}
	res, body := request(t, "POST", ts.URL+"/v1/processor/jobs/?op=pause&pattern=/carts/*", "", "Authorization", bearer(writerToken))
	wantCoded(t, "a bulk pause with a read-write token", res, body, http.StatusForbidden, foldtype.CodeForbidden)
	if got := bulk("pause", true); got.Matched != 3 || got.Changed != 3 || !got.DryRun {
		t.Fatalf("dry run: %+v, want 3 of 3", got)
	}
	stateOf := func(path string) string {
		for _, s := range h.ProcessorsOn(ctx, path) {
			if s.Slug == "jobs" {
				return s.State
			}
		}
		return ""
	}
	for _, path := range paths {
		if stateOf(path) == foldtype.StatePaused {
			t.Fatalf("%s paused by a dry run", path)
		}
	}
	if got := bulk("pause", false); got.Matched != 3 || got.Changed != 3 || got.Failed != 0 {
		t.Fatalf("pause: %+v, want 3 of 3", got)
	}
	for _, path := range paths {
		want := foldtype.StatePaused
		if path == "/other/x" {
			want = foldtype.StateRunning
		}
		if got := stateOf(path); (got == foldtype.StatePaused) != (want == foldtype.StatePaused) {
			t.Fatalf("%s after the bulk pause: %s, want %s", path, got, want)
		}
	}
	if got := bulk("pause", true); got.Changed != 0 {
		t.Fatalf("a second dry run: %+v, want nothing left to pause", got)
	}
	for _, path := range paths {
		if _, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
			t.Fatalf("append to %s: %v", path, err)
		}
	}
	if got := bulk("resume", false); got.Changed != 3 {
		t.Fatalf("resume: %+v, want 3", got)
	}
	for _, path := range paths {
		info, err := st.Events().HeadStream(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.WaitUntilProcessed(ctx, path, "jobs", info.Tail, 10*time.Second); err != nil {
			t.Fatalf("%s after the resume: %v", path, err)
		}
	}
	// One audit record per bulk verb, naming the pattern, newest first (the refused token's
	// request was not authorized, so it is not a verb).
	res, body = request(t, "GET", ts.URL+"/v1/processor/jobs/carts/*?audit=1", "", "Authorization", bearer(opsToken))
	var audit struct{ Audit []foldtype.AuditEntry }
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &audit) != nil {
		t.Fatalf("the audit of the pattern: %d %s", res.StatusCode, body)
	}
	want := []string{"resume done: 3 of 3 changed, 0 failed", "pause dry run: 0 of 3 would change",
		"pause done: 3 of 3 changed, 0 failed", "pause dry run: 3 of 3 would change"}
	var got []string
	for _, a := range audit.Audit {
		if a.Path != "/carts/*" || a.Slug != "jobs" || a.Reason != "bulk" {
			t.Fatalf("an audit record of the bulk verbs: %+v", a)
		}
		got = append(got, a.Op+" "+a.Outcome)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the audit of the bulk verbs: %q, want %q", got, want)
	}
}
