package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/testsupport"
)

// A paused processor takes no work — no ProcessEvent, no reduce, no checkpoint — while appends to
// its stream still land; its reads answer the last good state and its waits PROCESSOR_PAUSED; it
// stays paused across a restart of the host (the new host reads the row before it opens an
// engine); resumed, it catches up with what landed meanwhile, each effect once.
func TestAPausedProcessorTakesNoWorkAndStaysPausedAcrossARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "pause.db"), nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	p1 := newTicker(t, "ticks")
	if _, err := host.Register(ctx, h, "/p", p1); err != nil {
		t.Fatal(err)
	}
	tick := func() int64 {
		t.Helper()
		got, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "tick"})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		return got[0].Offset
	}
	tick()
	before := tick()
	if err := h.WaitUntilProcessed(ctx, "/p", "ticks", before, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	opctx := foldtype.WithOperatorRequest(ctx, foldtype.OperatorRequest{Actor: "carol"})
	if err := h.Pause(opctx, "/p", "ticks", "downstream maintenance"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := h.Pause(opctx, "/p", "ticks", "again"); err != nil {
		t.Fatalf("pausing a paused processor: %v, want nothing done", err)
	}
	st := statusOf(t, h, "/p", "ticks")
	if st.State != foldtype.StatePaused || st.Paused == nil || st.Paused.Reason != "downstream maintenance" || st.Paused.By != "carol" {
		t.Fatalf("status after the pause: %+v (paused %+v)", st, st.Paused)
	}
	during := []int64{tick(), tick()} // appends land
	if err := h.WaitUntilProcessed(ctx, "/p", "ticks", during[1], time.Second); !errors.Is(err, foldtype.ErrProcessorPaused) {
		t.Fatalf("wait on the paused processor: %v, want PROCESSOR_PAUSED", err)
	}
	if _, err := h.Snapshot(ctx, "/p", "ticks"); !errors.Is(err, foldtype.ErrProcessorPaused) {
		t.Fatalf("snapshot of the paused processor: %v, want PROCESSOR_PAUSED", err)
	}
	good, err := h.LastGoodState(ctx, "/p", "ticks")
	if err != nil || good.Offset != before || state(t, good.State).Ticks != 2 {
		t.Fatalf("last good state: %+v %v, want 2 ticks through %d", good, err, before)
	}
	rows, err := s.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{Path: "/p"})
	if err != nil || len(rows) != 1 || rows[0].State != foldtype.StatePaused || rows[0].Reason != "downstream maintenance" {
		t.Fatalf("stored rows: %+v %v, want the pause", rows, err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wantEachOnce(t, "effects before the pause", p1.gotEffects(), []int64{before - 1, before})

	// A new host on the same file: the processor is still paused, and runs nothing.
	h2 := newHost(t, s)
	defer h2.Shutdown(ctx)
	p2 := newTicker(t, "ticks")
	if _, err := host.Register(ctx, h2, "/p", p2); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, h2, "/p", "ticks"); st.State != foldtype.StatePaused {
		t.Fatalf("after the restart: %+v, want paused", st)
	}
	if err := h2.Resume(opctx, "/p", "ticks"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := h2.Resume(opctx, "/p", "ticks"); !errors.Is(err, foldtype.ErrConflict) {
		t.Fatalf("resuming a running processor: %v, want CONFLICT", err)
	}
	if err := h2.WaitUntilProcessed(ctx, "/p", "ticks", during[1], 5*time.Second); err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	waitFor(t, func() bool { return len(p2.gotEffects()) == 2 })
	wantEachOnce(t, "effects after the resume", p2.gotEffects(), during)
	if rows, err := s.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{}); err != nil || len(rows) != 0 {
		t.Fatalf("stored rows after the resume: %+v %v, want none", rows, err)
	}
}

// The default failure policy does not leave a stream wedged for ever: a processor that fails
// MaxAttempts times in a row on one event is paused, by "policy", with the failure (code, offset,
// event type, attempts) stored where a new host reads it; fixed and resumed, it processes the
// event and everything behind it, and its row is gone.
func TestTheFailurePolicyPausesAProcessorThatKeepsFailingWithItsFailureStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "policy.db"), clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	p := newFlaky(t)
	if _, err := host.Register(ctx, h, "/f", p, host.WithFailurePolicy(host.FailurePolicy{MaxAttempts: 3})); err != nil {
		t.Fatal(err)
	}
	var bad int64
	for _, typ := range []string{"tick", "bad", "tick"} {
		got, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		if typ == "bad" {
			bad = got[0].Offset
		}
	}
	// Attempt 1 failed; the retries run at 1 s and 2 s more on the clock.
	at := clk.Now()
	for _, d := range []time.Duration{host.FailRetryBase, 2 * host.FailRetryBase} {
		at = at.Add(d)
		clk.WaitArmed(t, at)
		clk.Advance(at.Sub(clk.Now()))
	}
	waitFor(t, func() bool { return statusOf(t, h, "/f", "flaky").State == foldtype.StatePaused })
	st := statusOf(t, h, "/f", "flaky")
	if st.Paused == nil || st.Paused.By != "policy" || st.Failing == nil || st.Failing.Offset != bad ||
		st.Failing.Attempts != 3 || st.Failing.Code != foldtype.CodeProcessEventFailed || st.Failing.EventType != "bad" {
		t.Fatalf("paused by the policy: %+v paused %+v failing %+v", st, st.Paused, st.Failing)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	h2, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Shutdown(ctx)
	p2 := newFlaky(t)
	p2.broken.Store(false) // the fix
	if _, err := host.Register(ctx, h2, "/f", p2); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, h2, "/f", "flaky"); st.State != foldtype.StatePaused || st.Failing == nil || st.Failing.Offset != bad {
		t.Fatalf("on the new host: %+v failing %+v, want paused on offset %d", st, st.Failing, bad)
	}
	if err := h2.Resume(ctx, "/f", "flaky"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Events().HeadStream(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.WaitUntilProcessed(ctx, "/f", "flaky", info.Tail, 5*time.Second); err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	if snap, err := h2.Snapshot(ctx, "/f", "flaky"); err != nil || state(t, snap.State).Ticks != 3 {
		t.Fatalf("after the resume: %s %v, want 3 events reduced", snap.State, err)
	}
	waitFor(t, func() bool {
		rows, err := s.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{})
		return err == nil && len(rows) == 0
	})
}

// A failing processor's failure is stored as it fails (code, offset, event type, attempts, node)
// and removed when it heals.
func TestAFailingProcessorsFailureIsStoredAndClearedWhenItHeals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "row.db"), clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true, NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx)
	p := newFlaky(t)
	if _, err := host.Register(ctx, h, "/f", p); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	var rows []driver.ProcessorStateRow
	waitFor(t, func() bool {
		rows, err = s.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{Path: "/f", Slug: "flaky"})
		return err == nil && len(rows) == 1
	})
	r := rows[0]
	if r.State != foldtype.StateFailing || r.Offset != got[0].Offset || r.EventType != "bad" || r.Attempts != 1 ||
		r.Code != string(foldtype.CodeProcessEventFailed) || r.Node != "node-a" || r.SinceMs == 0 {
		t.Fatalf("stored failure: %+v", r)
	}
	p.broken.Store(false)
	if err := h.RetryNow(ctx, "/f", "flaky"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		rows, err = s.Events().ProcessorStates(ctx, driver.ProcessorStateQuery{})
		return err == nil && len(rows) == 0
	})
}

// Two node processes on PostgreSQL: an operator pauses the counter through the node that does
// not run it (the verb goes to the owner); both nodes report it paused, with the reason. Its owner
// is SIGKILLed; a tick lands on the survivor, which takes the processor over and keeps it paused:
// no effect runs. Resumed through the survivor, the processor catches up and the tick's effect
// runs once. The audit lists both verbs from either node.
func TestAPausedProcessorStaysPausedOnTheNodeThatTakesOver(t *testing.T) {
	db := pgtest.URL(t)
	effects := &effectLog{}
	es := httptest.NewServer(effects)
	defer es.Close()
	const ttl = time.Second
	nodes := startNodes(t, db, 2, ttl, "--advertise", "--effects", es.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const path = "/counters/paused"
	do := func(method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if body != "" || method == http.MethodPut {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tick := func(base string, n int) {
		t.Helper()
		if code, body := do(http.MethodPost, base+"/v1/stream"+path, fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, n)); code/100 != 2 {
			t.Fatalf("append %d: %d %s", n, code, body)
		}
	}
	status := func(nd *node) foldtype.ProcessorStatus {
		t.Helper()
		code, body := do(http.MethodGet, nd.url()+"/v1/streams/info?path="+path, "")
		if code != http.StatusOK {
			return foldtype.ProcessorStatus{}
		}
		var info struct {
			Processors []foldtype.ProcessorStatus `json:"processors"`
		}
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatalf("info: %v %s", err, body)
		}
		for _, st := range info.Processors {
			if st.Slug == "counter" {
				return st
			}
		}
		return foldtype.ProcessorStatus{}
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		deadline := time.Now().Add(30 * ttl)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s\n%s", what, 30*ttl, allLogs(nodes))
			}
			<-tk.C
		}
	}
	if code, body := do(http.MethodPut, nodes[0].url()+"/v1/stream"+path, ""); code/100 != 2 {
		t.Fatalf("create: %d %s", code, body)
	}
	tick(nodes[0].url(), 1)
	until("the first tick's effect", func() bool { return len(effects.snapshot()) == 1 })
	// The node that ran the effect owns the processor.
	owner, other := nodes[0], nodes[1]
	if effects.snapshot()[0].Node != owner.incarnation() {
		owner, other = other, owner
	}
	var ownerID string
	until("an owner", func() bool { ownerID = status(other).Owner; return ownerID != "" })

	code, body := do(http.MethodPost, other.url()+"/v1/processor/counter"+path+"?op=pause&reason=hold+on", "")
	if code != http.StatusOK {
		t.Fatalf("pause through the other node: %d %s", code, body)
	}
	for _, nd := range nodes {
		until("paused on "+nd.name, func() bool {
			st := status(nd)
			return st.State == foldtype.StatePaused && st.Paused != nil && st.Paused.Reason == "hold on"
		})
	}

	owner.kill()
	tick(other.url(), 2)
	until("the survivor holds the paused processor", func() bool {
		st := status(other)
		return st.Owner != "" && st.Owner != ownerID && st.Local && st.State == foldtype.StatePaused
	})
	// The last good state answers reads, marked.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, other.url()+"/v1/processor/counter"+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Foldstream-Processor-State") != foldtype.StatePaused || !strings.Contains(string(b), `"ticks":1`) {
		t.Fatalf("read of the paused processor: %d %q %s, want its last good state marked paused", resp.StatusCode, resp.Header.Get("Foldstream-Processor-State"), b)
	}
	if n := len(effects.snapshot()); n != 1 {
		t.Fatalf("%d effects while paused, want only the first tick's", n)
	}

	if code, body := do(http.MethodPost, other.url()+"/v1/processor/counter"+path+"?op=resume&reason=go", ""); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	until("the second tick's effect", func() bool { return len(effects.snapshot()) == 2 })
	until("running", func() bool {
		st := status(other)
		return st.State == foldtype.StateRunning || st.State == foldtype.StateIdle
	})
	calls := effects.snapshot()
	if calls[0].N == calls[1].N {
		t.Fatalf("an effect ran twice: %+v", calls)
	}
	code, body = do(http.MethodGet, other.url()+"/v1/processor/counter"+path+"?audit=1", "")
	if code != http.StatusOK || !strings.Contains(body, `"op":"pause"`) || !strings.Contains(body, `"op":"resume"`) || !strings.Contains(body, `"reason":"hold on"`) {
		t.Fatalf("audit: %d %s", code, body)
	}
}
