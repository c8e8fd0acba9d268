package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
)

// A bulk pause over a path pattern: the dry run counts the streams it would touch and changes
// nothing; the pause pauses the processor on exactly the matching streams (a stream outside the
// pattern keeps running), a second dry run counts none left to pause, and the bulk resume lets
// every one catch up with what was appended meanwhile.
func TestABulkPauseOverAPatternCountsFirstThenPausesOnlyTheMatchingStreams(t *testing.T) {
	ctx := context.Background()
	st, h, ts := opsServer(t, nil, host.Config{}, "carol", server.Config{})
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"},
	}))}
	if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
		t.Fatal(err)
	}
	if err := host.RegisterPattern(ctx, h, "/other/*", p); err != nil {
		t.Fatal(err)
	}
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

// talliedByTen is the next version of "jobs": it counts each job by ten.
type talliedByTen struct{ foldstream.Base[poisonTally] }

func (talliedByTen) Reduce(a foldstream.ReduceArgs[poisonTally]) (poisonTally, bool, error) {
	return poisonTally{N: a.State.N + 10}, true, nil
}

// Bulk retry, skip and rebuild over HTTP answer the bulk shape (op, matched, changed, failed,
// dryRun): retry and skip count and touch the streams where the processor is failing, the skip
// parks each bad event, rebuild those where a next version is not switched in yet; an unknown
// bulk op is 400 BAD_REQUEST, and each verb leaves one audit record naming the pattern.
func TestBulkRetrySkipAndRebuildOverHTTPTouchWhatEachVerbChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, h, ts := opsServer(t, nil, host.Config{}, "carol", server.Config{})
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"},
	}))}
	p.broken.Store(true)
	if err := host.RegisterPattern(ctx, h, "/carts/*", p); err != nil {
		t.Fatal(err)
	}
	failing := []string{"/carts/a", "/carts/b"}
	for _, path := range failing {
		if _, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "job"}, foldtype.EventInput{Type: "poison"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Events().Stream("/carts/c").Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
		t.Fatal(err)
	}
	stateOf := func(path string) string {
		for _, s := range h.ProcessorsOn(ctx, path) {
			if s.Slug == "jobs" {
				return s.State
			}
		}
		return ""
	}
	for _, path := range failing {
		if !wait.For(20*time.Second, func() bool { return stateOf(path) == foldtype.StateFailing }) {
			t.Fatalf("%s did not fail within 20s: %+v", path, h.ProcessorsOn(ctx, path))
		}
	}
	type answer struct {
		Op      string
		Pattern string
		foldtype.BulkResult
	}
	bulk := func(op string, dry bool) answer {
		t.Helper()
		u := ts.URL + "/v1/processor/jobs/?op=" + op + "&pattern=/carts/*&reason=bulk"
		if dry {
			u += "&dryRun=1"
		}
		res, body := request(t, "POST", u, "", "Authorization", bearer(opsToken))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s (dry run %v): %d %s", op, dry, res.StatusCode, body)
		}
		var a answer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatal(err)
		}
		if a.Op != op || a.Pattern != "/carts/*" || a.DryRun != dry {
			t.Fatalf("%s: answer %s", op, body)
		}
		return a
	}
	res, body := request(t, "POST", ts.URL+"/v1/processor/jobs/?op=explode&pattern=/carts/*", "", "Authorization", bearer(opsToken))
	wantCoded(t, "an unknown bulk op", res, body, http.StatusBadRequest, foldtype.CodeBadRequest)
	if got := bulk("retry", true); got.Matched != 3 || got.Changed != 2 {
		t.Fatalf("retry dry run: %+v, want 2 of 3", got)
	}
	if got := bulk("retry", false); got.Matched != 3 || got.Changed != 2 || got.Failed != 0 {
		t.Fatalf("retry: %+v, want 2 of 3", got)
	}
	if got := bulk("skip", true); got.Matched != 3 || got.Changed != 2 {
		t.Fatalf("skip dry run: %+v, want 2 of 3", got)
	}
	if got := bulk("skip", false); got.Changed != 2 || got.Failed != 0 {
		t.Fatalf("skip: %+v, want 2 of 3 (%s)", got, got.FirstError)
	}
	for _, path := range failing {
		if err := h.WaitUntilProcessed(ctx, path, "jobs", 2, 20*time.Second); err != nil {
			t.Fatalf("%s after the bulk skip: %v", path, err)
		}
		parked, err := h.ParkedEvents(ctx, path, "jobs")
		if err != nil || len(parked) != 1 || parked[0].Reason != "bulk" {
			t.Fatalf("%s: parked %+v %v, want the poison parked", path, parked, err)
		}
	}
	if got := bulk("skip", true); got.Changed != 0 {
		t.Fatalf("skip dry run after the skip: %+v, want none", got)
	}
	if got := bulk("rebuild", true); got.Matched != 3 || got.Changed != 0 {
		t.Fatalf("rebuild dry run without a next version: %+v, want 0 of 3", got)
	}
	next := talliedByTen{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "2", Consumes: []string{"job", "poison"},
	}))}
	if err := host.RegisterNextVersion(ctx, h, "/carts/*", next); err != nil {
		t.Fatal(err)
	}
	if got := bulk("rebuild", true); got.Changed != 3 {
		t.Fatalf("rebuild dry run: %+v, want 3 of 3", got)
	}
	if got := bulk("rebuild", false); got.Changed != 3 || got.Failed != 0 {
		t.Fatalf("rebuild: %+v, want 3 of 3 (%s)", got, got.FirstError)
	}
	for _, path := range append(failing, "/carts/c") {
		if !wait.For(20*time.Second, func() bool {
			for _, s := range h.ProcessorsOn(ctx, path) {
				if s.Slug == "jobs" {
					return s.Version == "2"
				}
			}
			return false
		}) {
			t.Fatalf("%s was not switched to version 2 within 20s: %+v", path, h.ProcessorsOn(ctx, path))
		}
	}
	if got := bulk("rebuild", true); got.Changed != 0 {
		t.Fatalf("rebuild dry run after the switch: %+v, want none", got)
	}
	res, body = request(t, "GET", ts.URL+"/v1/processor/jobs/carts/*?audit=1", "", "Authorization", bearer(opsToken))
	var audit struct{ Audit []foldtype.AuditEntry }
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &audit) != nil {
		t.Fatalf("the audit of the pattern: %d %s", res.StatusCode, body)
	}
	ops := map[string]int{}
	for _, e := range audit.Audit {
		if e.Path != "/carts/*" {
			t.Fatalf("an audit record of a bulk verb names %q, want the pattern", e.Path)
		}
		ops[e.Op]++
	}
	if ops["retry"] != 2 || ops["skip"] != 3 || ops["rebuild"] != 4 {
		t.Fatalf("audit records by op: %v", ops)
	}
}
