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
	r := newStaleLiveRig(t)
	o1 := r.appendVia(r.a, 0, "m1")
	r.readVia(r.b, 1, o1, "long-poll") // B caches the stream's tail and watches it
	r.p.DropReplies()
	r.appendVia(r.a, 0, "m2")
	r.readVia(r.b, 1, o1, "long-poll")
	r.p.Restore()
	r.readVia(r.a, 2, "-1", "")
	r.check()
}

// TestALongPollAnsweredFromTheTailCacheOnANodeWhoseDatabaseAnswersAreLostClaimsNoStaleTail: the
// same fault, for a long-poll that B answers at once from its tail cache (its position lies
// inside the cached records) rather than after a wait. B heard m2 and cached it; then its
// database answers are lost and A acknowledges m3. A long-poll on B from before m2 must not
// answer m2 with Stream-Up-To-Date at m2's offset: the cache does not know whether a
// notification is still on its way. B first waits for its listener to hear a marker of its own
// sent after the read began (a listen barrier); the marker cannot come back, so B reads the
// database, which does not answer either: 503, never a stale tail.
func TestALongPollAnsweredFromTheTailCacheOnANodeWhoseDatabaseAnswersAreLostClaimsNoStaleTail(t *testing.T) {
	t.Parallel()
	r := newStaleLiveRig(t)
	o1 := r.appendVia(r.a, 0, "m1")
	r.readVia(r.b, 1, o1, "long-poll") // B caches the stream's tail and watches it
	r.appendVia(r.a, 0, "m2")
	r.readVia(r.b, 1, o1, "long-poll") // from the cache, which heard m2
	r.p.DropReplies()
	r.appendVia(r.a, 0, "m3")
	r.readVia(r.b, 1, o1, "long-poll")
	r.p.Restore()
	r.readVia(r.a, 2, "-1", "")
	r.check()
}

// staleLiveRig is two nodes on one database, B through a proxy the test controls, with a history
// recorder and a client for stream "s" (created through A).
type staleLiveRig struct {
	t    *testing.T
	a, b *history.Node
	p    *history.Proxy
	rec  *history.Recorder
	ctx  context.Context
	hc   *http.Client
}

func newStaleLiveRig(t *testing.T) *staleLiveRig {
	db := pgtest.URL(t)
	p := newProxy(t, pgURL(t, db).Host)
	via := *pgURL(t, db)
	via.Host = p.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := &staleLiveRig{t: t, a: startNode(t, db), b: startNode(t, via.String()), p: p, rec: history.NewRecorder(),
		ctx: ctx, hc: &http.Client{Timeout: 10 * time.Second}}
	if res, _ := r.do(http.MethodPut, r.a.URL()+"/s", ""); res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v", res)
	}
	return r
}

func (r *staleLiveRig) do(method, url, body string) (*http.Response, string) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.ctx, method, url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := r.hc.Do(req)
	if err != nil {
		return nil, ""
	}
	defer res.Body.Close()
	bs, _ := io.ReadAll(res.Body)
	return res, string(bs)
}

// appendVia appends msg through node n and returns the acknowledged next offset.
func (r *staleLiveRig) appendVia(n *history.Node, client int, msg string) string {
	r.t.Helper()
	call := r.rec.Begin(client, history.Input{Stream: "s", Kind: history.Append, Msg: msg})
	b, _ := json.Marshal(msg)
	res, _ := r.do(http.MethodPost, n.URL()+"/s", string(b))
	if res == nil || res.StatusCode != http.StatusNoContent {
		r.t.Fatalf("append %s: %v", msg, res)
	}
	next := res.Header.Get("Stream-Next-Offset")
	call.End(history.Output{Outcome: history.OK, Offset: next})
	return next
}

// readVia reads from offset from through node n (live "" for a catch-up read) and records it.
func (r *staleLiveRig) readVia(n *history.Node, client int, from, live string) {
	r.t.Helper()
	call := r.rec.Begin(client, history.Input{Stream: "s", Kind: history.Read, From: from})
	url := n.URL() + "/s?offset=" + from
	if live != "" {
		url += "&live=" + live
	}
	res, body := r.do(http.MethodGet, url, "")
	out := history.Output{Outcome: history.Unknown}
	switch {
	case res == nil:
	case res.StatusCode == http.StatusOK:
		out = history.Output{Outcome: history.OK, Offset: res.Header.Get("Stream-Next-Offset"),
			UpToDate: res.Header.Get("Stream-Up-To-Date") == "true", Msgs: []string{}}
		if err := json.Unmarshal([]byte(body), &out.Msgs); err != nil {
			r.t.Fatalf("read body %q: %v", body, err)
		}
	case res.StatusCode == http.StatusNoContent:
		out = history.Output{Outcome: history.OK, Offset: res.Header.Get("Stream-Next-Offset"), UpToDate: true, Msgs: []string{}}
	}
	r.t.Logf("%s", history.Describe(history.Input{Stream: "s", Kind: history.Read, From: from}, out))
	call.End(out)
}

// check hands the recorded history to the checker.
func (r *staleLiveRig) check() {
	r.t.Helper()
	res := history.Check(r.rec.Operations(), 10*time.Second, "")
	if res.Verdict != porcupine.Ok {
		r.t.Errorf("the history is not linearizable:\n%s", res.Explanation)
	}
}
