package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

type tickCount struct {
	Ticks int `json:"ticks"`
}

// tickStep counts "tick" events; step, when set, runs in ProcessEvent on every event with the
// number of the run (1, 2, ...).
type tickStep struct {
	foldstream.Base[tickCount]
	runs atomic.Int32
	step func(run int32) error
}

func newTickStep(t testing.TB, slug string, step func(run int32) error) *tickStep {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[tickCount]{Slug: slug, Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	return &tickStep{Base: foldstream.NewBase(c), step: step}
}

func (p *tickStep) Reduce(a foldstream.ReduceArgs[tickCount]) (tickCount, bool, error) {
	return tickCount{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *tickStep) ProcessEvent(a *foldstream.ProcessEventArgs[tickCount]) error {
	if a.Event == nil || p.step == nil {
		return nil
	}
	return p.step(p.runs.Add(1))
}

// serveOnClock serves a host over a store on the fake clock clk, with the host's MaxWait.
// processors wraps the host as the server's Processors (nil: the host itself).
func serveOnClock(t *testing.T, clk *testsupport.FakeClock, maxWait time.Duration, processors func(*host.Host) server.Processors) (string, *host.Host) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Clock: clk, Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet, MaxWait: maxWait, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	var ps server.Processors = h
	if processors != nil {
		ps = processors(h)
	}
	ts := httptest.NewServer(newServer(t, st, server.Config{Processors: ps, Logger: quiet}))
	t.Cleanup(func() {
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	return ts.URL, h
}

func statusState(h *host.Host, path, slug string) string {
	for _, st := range h.ProcessorsOn(context.Background(), path) {
		if st.Slug == slug {
			return st.State
		}
	}
	return ""
}

// yieldUntil yields until cond holds, failing t after about 10 s.
func yieldUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		runtime.Gosched()
	}
}

// waitState yields until the processor's status is want, failing t after about 10 s.
func waitState(t *testing.T, h *host.Host, path, slug, want string) {
	t.Helper()
	yieldUntil(t, func() bool { return statusState(h, path, slug) == want })
}

// Over HTTP: a processor whose ProcessEvent failed once, healed by the catch-up of a
// waitUntilProcessed request that began before the failure was noted, answers that request and
// the next plain GET with 200 and its state at once — not 503 PROCESSOR_FAILING until the host's
// timed retry (the fake clock never moves here).
func TestAHealedProcessorAnswers200OverHTTPAfterTheHealingRead(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	const maxWait = 2 * time.Second
	base, h := serveOnClock(t, clk, maxWait, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	again, heal := make(chan struct{}), make(chan struct{})
	p := newTickStep(t, "once", func(run int32) error {
		switch run {
		case 1:
			close(entered)
			<-release
			return errors.New("the first run fails")
		case 2:
			close(again)
			<-heal
		}
		return nil
	})
	eng, err := host.Register(t.Context(), h, "/heal", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Snapshot(t.Context(), "/heal", "once"); err != nil { // the opening catch-up is done
		t.Fatal(err)
	}

	res, body := httpDo(t, http.MethodPost, base+"/v1/stream/heal", "application/json", `{"type":"tick"}`)
	if res.StatusCode/100 != 2 {
		t.Fatalf("append: %d %s", res.StatusCode, body)
	}
	next := res.Header.Get("Stream-Next-Offset")
	<-entered // the push runs the event: the one unit on the engine's chain

	type answer struct {
		res  *http.Response
		body string
	}
	healing := make(chan answer, 1)
	go func() {
		res, body := httpDo(t, http.MethodGet, base+"/v1/processor/once/heal?timeout=5s&waitUntilProcessed="+next, "", "")
		healing <- answer{res, body}
	}()
	// The wait found the processor healthy and queued its catch-up behind the push.
	yieldUntil(t, func() bool { return eng.Pending() == 2 })
	close(release) // the push fails ...
	<-again        // ... and the wait's catch-up runs the event again, held until the host noted the failure
	waitState(t, h, "/heal", "once", foldtype.StateFailing)
	close(heal)

	a := <-healing
	if a.res.StatusCode != http.StatusOK {
		t.Fatalf("the healing GET: %d %s %s, want 200", a.res.StatusCode, a.res.Header.Get(server.HeaderErrorCode), a.body)
	}
	res, body = httpDo(t, http.MethodGet, base+"/v1/processor/once/heal", "", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the GET after it: %d %s %s, want 200", res.StatusCode, res.Header.Get(server.HeaderErrorCode), body)
	}
	var snap struct {
		State tickCount `json:"state"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil || snap.State.Ticks != 1 {
		t.Fatalf("state %s (%v), want 1 tick", body, err)
	}
}

// endingCaller hands the host's reads a caller context whose deadline, on the fake clock, is 1 ms
// after the host's read bound: from then on its Err says DeadlineExceeded, while its Done stays
// open so the bound is what ends the read. That is the server's own bound (as long as the host's
// by default) firing just after the host's.
type endingCaller struct {
	*host.Host
	clk   *testsupport.FakeClock
	bound time.Duration
}

type endsAt struct {
	context.Context
	clk *testsupport.FakeClock
	at  time.Time
}

func (c endsAt) Err() error {
	if !c.clk.Now().Before(c.at) {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

func (p endingCaller) caller(ctx context.Context) context.Context {
	return endsAt{Context: context.WithoutCancel(ctx), clk: p.clk, at: p.clk.Now().Add(p.bound + time.Millisecond)}
}

func (p endingCaller) Snapshot(ctx context.Context, path, slug string) (foldtype.Snapshot[json.RawMessage], error) {
	return p.Host.Snapshot(p.caller(ctx), path, slug)
}

func (p endingCaller) LiveSnapshot(ctx context.Context, path, slug string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	return p.Host.LiveSnapshot(p.caller(ctx), path, slug)
}

// The symptom as a user met it: many events appended in one POST to a stream a pattern covers,
// then a GET of the processor while it catches up on them. Past the host's bound the GET answers
// 503 CATCHING_UP with Retry-After and the processor's offset, for the snapshot and the live view
// alike — also when the server's own deadline fires just after the host's bound — never 500
// INTERNAL ("host: read bound passed").
func TestAGetDuringALongCatchUpAnswersCatchingUpNot500(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	const maxWait = 1700 * time.Millisecond
	base, h := serveOnClock(t, clk, maxWait, func(h *host.Host) server.Processors {
		return endingCaller{Host: h, clk: clk, bound: maxWait}
	})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the host's shutdown, should the test end early
	p := newTickStep(t, "tally", func(run int32) error {
		if run == 1 {
			close(entered)
			<-release // a long catch-up: its first event holds it
		}
		return nil
	})
	if err := host.RegisterPattern(t.Context(), h, "/bulk/*", p); err != nil {
		t.Fatal(err)
	}
	if res, body := httpDo(t, http.MethodPut, base+"/v1/stream/bulk/a", "application/json", ""); res.StatusCode/100 != 2 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	const n = 2000
	res, body := httpDo(t, http.MethodPost, base+"/v1/stream/bulk/a", "application/json", "["+strings.TrimSuffix(strings.Repeat(`{"type":"tick"},`, n), ",")+"]")
	if res.StatusCode/100 != 2 {
		t.Fatalf("append: %d %s", res.StatusCode, body)
	}
	for _, view := range []string{"", "?view=live"} {
		type answer struct {
			res  *http.Response
			body string
		}
		got := make(chan answer, 1)
		go func() {
			res, body := httpDo(t, http.MethodGet, base+"/v1/processor/tally/bulk/a"+view, "", "")
			got <- answer{res, body}
		}()
		clk.WaitArmed(t, clk.Now().Add(maxWait)) // the read's bound
		<-entered                                // the engine is catching up, held on its first event
		clk.Advance(maxWait + time.Millisecond)  // the host's bound, then the caller's deadline
		a := <-got
		wantCoded(t, "GET during the catch-up"+view, a.res, a.body, http.StatusServiceUnavailable, foldtype.CodeCatchingUp)
		if a.res.Header.Get("Retry-After") == "" || a.res.Header.Get(server.HeaderProcessorOffset) == "" {
			t.Fatalf("%s: headers %v, want Retry-After and %s", view, a.res.Header, server.HeaderProcessorOffset)
		}
	}
	free()
	res, body = httpDo(t, http.MethodGet, base+"/v1/processor/tally/bulk/a", "", "")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"ticks":2000`) {
		t.Fatalf("after the catch-up: %d %s, want 200 with 2000 ticks", res.StatusCode, body)
	}
}
