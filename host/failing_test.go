package host_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// flaky counts ticks and panics in ProcessEvent on a "bad" event while broken is set.
type flaky struct {
	foldstream.Base[countState]
	broken atomic.Bool
}

func newFlaky(t testing.TB) *flaky {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{
		Slug: "flaky", Version: "1", Consumes: []string{"tick", "bad"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &flaky{Base: foldstream.NewBase(c)}
	p.broken.Store(true)
	return p
}

func (p *flaky) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *flaky) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event != nil && a.Event.Type == "bad" && p.broken.Load() {
		panic("the bad event")
	}
	return nil
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func statusOf(t *testing.T, h *host.Host, path, slug string) foldtype.ProcessorStatus {
	t.Helper()
	for _, st := range h.ProcessorsOn(context.Background(), path) {
		if st.Slug == slug {
			return st
		}
	}
	t.Fatalf("no status of %s on %s", slug, path)
	return foldtype.ProcessorStatus{}
}

// A ProcessEvent that panics makes its processor failing, visibly and for that processor alone: its
// status says failing with the code, message, failing offset, attempts and next retry; its reads
// answer PROCESSOR_FAILING; the log carries the stack once; it retries with backoff on the clock
// and recovers by itself once the event processes. Another processor on the stream keeps going.
func TestFailingProcessorIsVisibleAndRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	var logs syncBuffer
	h, err := host.New(s, host.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	p := newFlaky(t)
	if _, err := host.Register(ctx, h, "/f", p); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/f", newTicker(t, "ticker")); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	bad, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))

	st := statusOf(t, h, "/f", "flaky")
	if st.State != foldtype.StateFailing || st.Failing == nil {
		t.Fatalf("status: %+v, want failing", st)
	}
	if f := st.Failing; f.Code != foldtype.CodeProcessEventFailed || f.Offset != bad[0].Offset || f.Attempts != 1 ||
		!f.NextRetry.Equal(start.Add(host.FailRetryBase)) || !strings.Contains(f.Message, "the bad event") {
		t.Fatalf("failure: %+v, want PROCESS_EVENT_FAILED at %d, 1 attempt, next retry in %v", f, bad[0].Offset, host.FailRetryBase)
	}
	var fe *foldtype.Error
	if _, err := h.Snapshot(ctx, "/f", "flaky"); !errors.Is(err, foldtype.ErrProcessorFailing) || !errors.As(err, &fe) || fe.Data["offset"] != bad[0].Offset {
		t.Fatalf("snapshot of the failing processor: %v, want PROCESSOR_FAILING at offset %d", err, bad[0].Offset)
	}
	if snap := ticksOf(t, h, "/f"); state(t, snap.State).Ticks != 2 {
		t.Fatalf("the other processor: %s, want 2 ticks", snap.State)
	}
	if st := statusOf(t, h, "/f", "ticker"); st.State != foldtype.StateRunning {
		t.Fatalf("the other processor's status: %+v, want running", st)
	}

	// The retry fails again: one more attempt, twice the delay, and no second stack in the log.
	clk.Advance(host.FailRetryBase)
	clk.WaitArmed(t, clk.Now().Add(2*host.FailRetryBase))
	if f := statusOf(t, h, "/f", "flaky").Failing; f == nil || f.Attempts != 2 {
		t.Fatalf("after the first retry: %+v, want 2 attempts", f)
	}
	if n := strings.Count(logs.String(), "stack=\"goroutine "); n != 1 {
		t.Fatalf("stacks in the log: %d, want 1 (one per distinct failure)\n%s", n, logs.String())
	}

	// Fixed: the next retry processes the event and everything after it.
	p.broken.Store(false)
	clk.Advance(2 * host.FailRetryBase)
	waitFor(t, func() bool { return statusOf(t, h, "/f", "flaky").State == foldtype.StateRunning })
	info, err := s.Events().HeadStream(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/f", "flaky", info.Tail, 5*time.Second); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	snap, err := h.Snapshot(ctx, "/f", "flaky")
	if err != nil {
		t.Fatal(err)
	}
	if state(t, snap.State).Ticks != 3 {
		t.Fatalf("after recovering: %s, want 3 events reduced", snap.State)
	}
	if st := statusOf(t, h, "/f", "flaky"); st.State != foldtype.StateRunning || st.Failing != nil {
		t.Fatalf("status after recovering: %+v, want running", st)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor yields until cond holds, failing t after about 10 s. It never sleeps: cond is a state
// another goroutine moves, re-checked each time the scheduler comes back.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		runtime.Gosched()
	}
}

type amount struct {
	N int `json:"n" jsonschema:"minimum=1"`
}

// picky reduces "add" events (payload schema: n ≥ 1) and panics in Reduce on "boom".
type picky struct{ foldstream.Base[countState] }

func newPicky(t testing.TB) *picky {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{
		Slug: "picky", Version: "1", Consumes: []string{"add", "boom"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[amount]("add", "an amount")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &picky{Base: foldstream.NewBase(c)}
}

func (p *picky) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	if a.Event.Type == "boom" {
		panic("reduce cannot take it")
	}
	return countState{Ticks: a.State.Ticks + a.Payload.(amount).N}, true, nil
}

// Skipped events are counted per processor, by reason, with the last offset and error, and each
// distinct reason is logged in full (a Reduce panic with its stack) the first time only.
func TestSkippedEventsAreCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	var logs syncBuffer
	h, err := host.New(s, host.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/p", newPicky(t)); err != nil {
		t.Fatal(err)
	}
	add := func(n int) foldtype.EventInput {
		return foldtype.EventInput{Type: "add", Payload: foldtype.JSON(map[string]int{"n": n})}
	}
	var last []foldtype.Event
	for range 3 {
		var err error
		if last, err = s.Events().Stream("/p").Append(ctx, add(2), add(0), foldtype.EventInput{Type: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := h.Snapshot(ctx, "/p", "picky")
	if err != nil {
		t.Fatal(err)
	}
	if state(t, snap.State).Ticks != 6 {
		t.Fatalf("state %s, want the three valid adds (6)", snap.State)
	}
	st := statusOf(t, h, "/p", "picky")
	want := map[string]int64{foldstream.SiteReducePayload: last[1].Offset, foldstream.SiteReduce: last[2].Offset}
	if len(st.Skipped) != 2 {
		t.Fatalf("skipped: %+v, want two reasons", st.Skipped)
	}
	for _, sk := range st.Skipped {
		if sk.Count != 3 || sk.LastOffset != want[sk.Reason] || sk.LastError == "" {
			t.Fatalf("skipped %+v, want 3 at last offset %d with the error", sk, want[sk.Reason])
		}
	}
	out := logs.String()
	for _, site := range []string{foldstream.SiteReducePayload, foldstream.SiteReduce} {
		if n := strings.Count(out, "skipped an event ("+site+")"); n != 1 {
			t.Fatalf("full log lines for %s: %d, want 1\n%s", site, n, out)
		}
	}
	if !strings.Contains(out, `stack="goroutine`) {
		t.Fatalf("the Reduce panic's stack is not in the log:\n%s", out)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// failsOnce is a ticker whose ProcessEvent, on its first event, waits for release and fails; on
// its second run of an event it says so on again and waits for healing before it succeeds.
type failsOnce struct {
	*ticker
	entered, release chan struct{} // the failing run
	again, heal      chan struct{} // the run after it
	runs             atomic.Int32
}

func newFailsOnce(t testing.TB, slug string) *failsOnce {
	return &failsOnce{ticker: newTicker(t, slug), entered: make(chan struct{}), release: make(chan struct{}),
		again: make(chan struct{}), heal: make(chan struct{})}
}

func (p *failsOnce) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	switch p.runs.Add(1) {
	case 1:
		close(p.entered)
		<-p.release
		return errors.New("the first run fails")
	case 2:
		close(p.again)
		<-p.heal
	}
	return nil
}

// When a path other than the timed retry runs a failed event again successfully — here the
// catch-up of a WaitUntilProcessed that began before the failure was noted — the host drops its
// failing record at once: the wait returns, the next snapshot answers with the state and the
// status says running, with the fake clock never moved (the retry never fired).
func TestAHealedProcessorAnswersAtOnceAfterAReadsCatchUpRanItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	p := newFailsOnce(t, "once")
	if _, err := host.Register(ctx, h, "/heal", p); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Snapshot(ctx, "/heal", "once"); err != nil { // the opening catch-up is done
		t.Fatal(err)
	}
	got, err := s.Events().Stream("/heal").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.entered // the push runs the event

	// The wait finds the processor healthy and queues its catch-up behind the push: its own
	// timeout, armed after the catch-up is queued, says so.
	const timeout = 5 * time.Second
	waited := make(chan error, 1)
	go func() { waited <- h.WaitUntilProcessed(ctx, "/heal", "once", got[0].Offset, timeout) }()
	clk.WaitArmed(t, testT.Add(timeout))

	close(p.release) // the push fails ...
	<-p.again        // ... and the wait's catch-up runs the event again, held until the host noted the failure
	waitFor(t, func() bool { return statusOf(t, h, "/heal", "once").State == foldtype.StateFailing })
	close(p.heal)
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}

	snap, err := h.Snapshot(ctx, "/heal", "once")
	if err != nil {
		t.Fatalf("snapshot after the healing read: %v, want the state at once", err)
	}
	if snap.Offset < got[0].Offset || state(t, snap.State).Ticks != 1 {
		t.Fatalf("snapshot: offset %d %s, want 1 tick through %d", snap.Offset, snap.State, got[0].Offset)
	}
	if st := statusOf(t, h, "/heal", "once"); st.State != foldtype.StateRunning || st.Failing != nil {
		t.Fatalf("status after healing: %+v, want running", st)
	}
	// The next event processes as usual.
	next, err := s.Events().Stream("/heal").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/heal", "once", next[0].Offset, timeout); err != nil {
		t.Fatalf("wait for the next event: %v", err)
	}
	if n := p.runs.Load(); n != 3 {
		t.Fatalf("ProcessEvent runs: %d, want 3 (the failure, its healing run, the next event)", n)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
