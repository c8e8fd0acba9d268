package history_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/history"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// TestALongPollOnANodeWhoseDatabaseAnswersAreLostClaimsNoStaleTail: node B serves live reads
// from its tail cache, kept current by PostgreSQL notifications. When B's database connections
// stay open but their answers are lost, no notification arrives and B does not notice for a
// while: a long-poll on B that times out answers 204 "up to date" at the tail B last knew, after
// node A acknowledged an append past it. The checker rejects that history (a reader that stops
// at Stream-Up-To-Date misses an acknowledged append). Before it claims Up-To-Date on a shared
// database, a long-poll that ran out now confirms its tail with the database: B answers the data,
// or 503 when its database does not answer, never a stale tail.
func TestALongPollOnANodeWhoseDatabaseAnswersAreLostClaimsNoStaleTail(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	p := newProxy(t, pgURL(t, db).Host)
	via := *pgURL(t, db)
	via.Host = p.Addr()
	a, b := startNode(t, db), startNode(t, via.String())
	rec := history.NewRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, url, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" || method == http.MethodPut {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := hc.Do(req)
		if err != nil {
			return nil, ""
		}
		defer res.Body.Close()
		bs, _ := io.ReadAll(res.Body)
		return res, string(bs)
	}
	if res, _ := do(http.MethodPut, a.URL()+"/s", ""); res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v", res)
	}
	appendVia := func(n *history.Node, client int, msg string) string {
		t.Helper()
		call := rec.Begin(client, history.Input{Stream: "s", Kind: history.Append, Msg: msg})
		b, _ := json.Marshal(msg)
		res, _ := do(http.MethodPost, n.URL()+"/s", string(b))
		if res == nil || res.StatusCode != http.StatusNoContent {
			t.Fatalf("append %s: %v", msg, res)
		}
		next := res.Header.Get("Stream-Next-Offset")
		call.End(history.Output{Outcome: history.OK, Offset: next})
		return next
	}
	readVia := func(n *history.Node, client int, from, live string) {
		t.Helper()
		call := rec.Begin(client, history.Input{Stream: "s", Kind: history.Read, From: from})
		url := n.URL() + "/s?offset=" + from
		if live != "" {
			url += "&live=" + live
		}
		res, body := do(http.MethodGet, url, "")
		out := history.Output{Outcome: history.Unknown}
		switch {
		case res == nil:
		case res.StatusCode == http.StatusOK:
			out = history.Output{Outcome: history.OK, Offset: res.Header.Get("Stream-Next-Offset"),
				UpToDate: res.Header.Get("Stream-Up-To-Date") == "true", Msgs: []string{}}
			if err := json.Unmarshal([]byte(body), &out.Msgs); err != nil {
				t.Fatalf("read body %q: %v", body, err)
			}
		case res.StatusCode == http.StatusNoContent:
			out = history.Output{Outcome: history.OK, Offset: res.Header.Get("Stream-Next-Offset"), UpToDate: true, Msgs: []string{}}
		}
		t.Logf("%s", history.Describe(history.Input{Stream: "s", Kind: history.Read, From: from}, out))
		call.End(out)
	}
	o1 := appendVia(a, 0, "m1")
	readVia(b, 1, o1, "long-poll") // B caches the stream's tail and watches it
	p.DropReplies()
	appendVia(a, 0, "m2")
	readVia(b, 1, o1, "long-poll")
	p.Restore()
	readVia(a, 2, "-1", "")
	r := history.Check(rec.Operations(), 10*time.Second, "")
	if r.Verdict != porcupine.Ok {
		t.Errorf("the history is not linearizable:\n%s", r.Explanation)
	}
}
