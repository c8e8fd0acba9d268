package host_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// effects records the offsets whose ProcessEvent ran: the effects a processor had.
type effects struct {
	mu      sync.Mutex
	offsets []int64
}

func (e *effects) ran() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.offsets)
}

// effector folds "tick" events and records each one's ProcessEvent.
type effector struct {
	foldstream.Base[countState]
	fx *effects
}

func (p *effector) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1, Offsets: append(slices.Clone(a.State.Offsets), a.Event.Offset)}, true, nil
}

func (p *effector) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil // an eventless pass at the head
	}
	p.fx.mu.Lock()
	p.fx.offsets = append(p.fx.offsets, a.Event.Offset)
	p.fx.mu.Unlock()
	return nil
}

// catchUpDown opens a SQLite store on the fake clock over a driver whose log reads can be cut,
// with three ticks on /f.
func catchUpDown(t *testing.T, clk *testsupport.FakeClock) (*stream.Store, *recordsDown) {
	t.Helper()
	ctx := context.Background()
	sd := sqliteDriver(t)
	d := &recordsDown{Driver: sd}
	s := storeOver(t, sd, d, clk)
	for range 3 {
		if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	return s, d
}

func newEffector(t *testing.T) (*effector, *effects) {
	t.Helper()
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{Slug: "effector", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	fx := &effects{}
	return &effector{Base: foldstream.NewBase(c), fx: fx}, fx
}

// waitEffects waits (in real time, the fake clock standing still) until the processor ran the
// events at want, and fails if it ran others or ran one twice.
func waitEffects(t *testing.T, fx *effects, want []int64) {
	t.Helper()
	wait.For(10*time.Second, func() bool { return len(fx.ran()) >= len(want) })
	if got := fx.ran(); !slices.Equal(got, want) {
		t.Fatalf("ProcessEvent ran at offsets %v, want %v", got, want)
	}
}

// registeredWhileDown registers an effector on /f of a store whose log reads are refused (with
// msg, when set), on a host logging to log (nil: nowhere), and returns once its opening catch-up
// was refused: the engine is at 0, below the three ticks.
func registeredWhileDown(t *testing.T, clk *testsupport.FakeClock, msg string, log *slog.Logger) (*stream.Store, *recordsDown, *host.Host, *effects, *foldstream.Engine[countState]) {
	t.Helper()
	s, d := catchUpDown(t, clk)
	d.msg = msg
	if log == nil {
		log = quietLog
	}
	h, err := host.New(s, host.Config{Logger: log, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	p, fx := newEffector(t)
	d.down.Store(true)
	eng, err := host.Register(context.Background(), h, "/f", foldstream.Processor[countState](p))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return d.refused.Load() > 0 })
	if got := eng.ReducedThroughOffset(); got != 0 {
		t.Fatalf("the engine reduced through %d with the log unreadable; the test wants its catch-up to fail", got)
	}
	return s, d, h, fx, eng
}

// TestAnEngineWhoseOpeningCatchUpFailedCatchesUpOnceTheDatabaseAnswers: a processor registered
// while the database would not read the log is below the events committed before it. Nobody
// appends to the stream or reads the processor afterwards; it still processes them, on its
// catch-up's retry, once the database answers — and only once.
func TestAnEngineWhoseOpeningCatchUpFailedCatchesUpOnceTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	start := clk.Now()
	_, d, _, fx, eng := registeredWhileDown(t, clk, "", nil)
	d.down.Store(false)
	// Before the fix nothing was armed: the engine stayed at 0 until the stream's next append.
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	clk.Advance(host.FailRetryBase)
	waitEffects(t, fx, []int64{1, 2, 3})
	waitFor(t, func() bool { return eng.ReducedThroughOffset() >= 3 })
}

// TestACatchUpRetryBacksOffWhileTheDatabaseStaysDown: while the log stays unreadable the retry
// doubles its delay, and the first one after the database answers processes the events.
func TestACatchUpRetryBacksOffWhileTheDatabaseStaysDown(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	start := clk.Now()
	var logs syncBuffer
	_, d, h, fx, _ := registeredWhileDown(t, clk, "", slog.New(slog.NewTextHandler(&logs, nil)))
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	st := statusOf(t, h, "/f", "effector")
	if w := st.WaitingForStore; w == nil || w.Write != "log read" || w.Code != foldtype.CodeUnavailable || w.Attempts != 1 ||
		!w.Since.Equal(start) || !w.NextRetry.Equal(start.Add(host.FailRetryBase)) || !w.GivesUpAt.IsZero() {
		t.Fatalf("status while the log cannot be read: %+v, want a log read waiting for the database, 1 attempt, next at %v", w, start.Add(host.FailRetryBase))
	}
	clk.Advance(host.FailRetryBase)
	clk.WaitArmed(t, clk.Now().Add(2*host.FailRetryBase))
	if got := fx.ran(); len(got) != 0 {
		t.Fatalf("ProcessEvent ran at %v with the log unreadable", got)
	}
	if w := statusOf(t, h, "/f", "effector").WaitingForStore; w == nil || w.Attempts != 2 {
		t.Fatalf("status after the first retry: %+v, want 2 attempts", w)
	}
	d.down.Store(false)
	clk.Advance(2 * host.FailRetryBase)
	waitEffects(t, fx, []int64{1, 2, 3})
	waitFor(t, func() bool { return statusOf(t, h, "/f", "effector").WaitingForStore == nil })
	// One warning per refused attempt, with its count and delay, and one line once caught up (written
	// just after the status cleared).
	wait.For(10*time.Second, func() bool { return strings.Contains(logs.String(), "caught up with the log again") })
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"host: processor"); n != 2 ||
		!strings.Contains(out, "attempts=1 next_retry_in=1s") || !strings.Contains(out, "attempts=2 next_retry_in=2s") {
		t.Fatalf("%d warnings; want one per refused attempt (2) with its count and delay:\n%s", n, out)
	}
	if !strings.Contains(out, "level=INFO msg=\"host: processor caught up with the log again\"") || !strings.Contains(out, "attempts=2 waited=3s") {
		t.Fatalf("no line saying the processor caught up after 2 attempts and 3 s:\n%s", out)
	}
}

// sweepUntil moves the fake clock on an idle sweep at a time (idle/2), up to just before until,
// and fails if a sweep closed the one open pattern engine.
func sweepUntil(t *testing.T, h *host.Host, clk *testsupport.FakeClock, idle time.Duration, until time.Time) {
	t.Helper()
	start := clk.Now()
	for clk.Now().Add(idle / 2).Before(until) {
		next := clk.Now().Add(idle)
		clk.Advance(idle / 2)
		wait.For(10*time.Second, func() bool {
			return h.OpenPatternEngines() == 0 || slices.ContainsFunc(clk.Pending(), next.Equal)
		})
		if h.OpenPatternEngines() == 0 {
			t.Fatalf("the idle sweep closed the engine %v after it began; its retry was due at %v", clk.Now().Sub(start), until.Sub(start))
		}
	}
}

// ticksWhileDown appends more than a page of ticks to /f in one batch, with the log's reads refused
// from then on, and returns their offsets.
func ticksWhileDown(t *testing.T, s *stream.Store, d *recordsDown) []int64 {
	t.Helper()
	batch := make([]foldtype.EventInput, foldstream.EnginePageSize+100)
	for i := range batch {
		batch[i] = foldtype.EventInput{Type: "tick"}
	}
	d.down.Store(true)
	evs, err := s.Events().Stream("/f").Append(context.Background(), batch...)
	if err != nil {
		t.Fatal(err)
	}
	offsets := make([]int64, len(evs))
	for i, ev := range evs {
		offsets[i] = ev.Offset
	}
	return offsets
}

// TestAnEngineClosedToMakeRoomWhileBehindTheLogReadsItBeforeItCloses: on SQLite a closing engine
// skips its closing read of the log when its cursor reached what its subscription saw. An engine
// whose opening catch-up failed after its first page, with a subscription that saw nothing (the
// batch that opened it was committed before it subscribed, and the stream was woken already), is
// behind the log all the same: closed to make room under MaxOpenEngines before its retry, it reads
// the log first, so the rest of the batch is processed without an append to wake it. (The idle
// sweep does not close such an engine: TestAnEngineBehindTheLogIsNotClosedAsIdle.)
func TestAnEngineClosedToMakeRoomWhileBehindTheLogReadsItBeforeItCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s, d := catchUpDown(t, clk)
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true, MaxOpenEngines: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	p, fx := newEffector(t)
	if err := host.RegisterPattern(ctx, h, "/*", foldstream.Processor[countState](p)); err != nil {
		t.Fatal(err)
	}
	if err := host.RegisterPattern(ctx, h, "/g/*", foldstream.Processor[countState](newTicker(t, "other"))); err != nil {
		t.Fatal(err)
	}
	// A tick on another stream of the cap opens its engine, which closes /f's (the one open).
	makeRoom := func(g string) {
		t.Helper()
		if _, err := s.Events().Stream(g).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { st := h.ProcessorsOn(ctx, "/f"); return len(st) == 1 && !st[0].Open })
	}
	// A tick opens /f's engine for work: it wakes the stream and processes the ticks.
	tick, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 2, 3, tick[0].Offset}
	waitEffects(t, fx, want)
	makeRoom("/g/1")
	// More than a page in one batch, while the log cannot be read: the opening reads the first page
	// in the writer, and the catch-up's next page fails.
	want = append(want, ticksWhileDown(t, s, d)...)
	waitFor(t, func() bool { return d.refused.Load() > 0 })
	d.down.Store(false)
	if got := fx.ran(); len(got) != 4+foldstream.EnginePageSize {
		t.Fatalf("ProcessEvent ran %d times before the engine closed; want the opening's first page, %d", len(got), 4+foldstream.EnginePageSize)
	}
	makeRoom("/g/2") // before the catch-up's retry: the fake clock stands still
	wait.For(10*time.Second, func() bool { return len(fx.ran()) >= len(want) })
	if got := fx.ran(); !slices.Equal(got, want) {
		t.Fatalf("closed having run %d events, the last at %d; want all %d, through %d", len(got), got[len(got)-1], len(want), want[len(want)-1])
	}
}

// TestAnEngineBehindTheLogIsNotClosedAsIdle: an engine of a pattern whose catch-up could not read
// the log is behind it with its retry armed. The idle sweep does not close it; its retry catches
// it up once the database answers, and then it closes as idle.
func TestAnEngineBehindTheLogIsNotClosedAsIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s, d := catchUpDown(t, clk)
	const idle = 100 * time.Millisecond
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	p, fx := newEffector(t)
	if err := host.RegisterPattern(ctx, h, "/*", foldstream.Processor[countState](p)); err != nil {
		t.Fatal(err)
	}
	closed := func() bool { return h.OpenPatternEngines() == 0 }
	idleOut := func() {
		for !closed() {
			clk.Advance(idle / 2)
			wait.For(time.Second, func() bool { return closed() || len(clk.Pending()) > 0 })
		}
	}
	// A tick opens the engine for work: it wakes the stream, processes the ticks, and closes idle.
	tick, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 2, 3, tick[0].Offset}
	waitEffects(t, fx, want)
	idleOut()
	// More than a page in one batch while the log cannot be read: the engine reopens, reads the
	// first page in the writer, and its catch-up's next page fails.
	start := clk.Now()
	want = append(want, ticksWhileDown(t, s, d)...)
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	waitFor(t, func() bool { return h.SlotRefs("/f", "effector") == 0 })
	sweepUntil(t, h, clk, idle, start.Add(host.FailRetryBase))
	d.down.Store(false)
	clk.Advance(start.Add(host.FailRetryBase).Sub(clk.Now()))
	waitEffects(t, fx, want)
	idleOut()
}

// TestAnEngineBehindTheLogSaysSoOverHTTPAndCatchesUpOnAnOperatorsRetry: over HTTP, a processor
// whose catch-up could not read the log shows a log read waiting for the database on the stream
// information route (the driver's words withheld), and POST ?op=retry runs its catch-up at once,
// without waiting for its backoff.
func TestAnEngineBehindTheLogSaysSoOverHTTPAndCatchesUpOnAnOperatorsRetry(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	s, d, h, fx, _ := registeredWhileDown(t, clk, "read records: dial tcp 10.0.0.7:5432: connect: connection refused", nil)
	clk.WaitArmed(t, clk.Now().Add(host.FailRetryBase))
	base := serveHost(t, s, h)

	info := func() (string, *foldtype.ProcessorStoreWait) {
		t.Helper()
		res, err := http.Get(base + "/v1/streams/info?path=/f")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var body struct {
			Processors []struct {
				WaitingForStore *foldtype.ProcessorStoreWait `json:"waitingForStore"`
			} `json:"processors"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(b, &body) != nil || len(body.Processors) != 1 {
			t.Fatalf("GET the stream's information: %d %s", res.StatusCode, b)
		}
		return string(b), body.Processors[0].WaitingForStore
	}
	raw, w := info()
	if w == nil || w.Write != "log read" || w.Code != foldtype.CodeUnavailable || w.Attempts != 1 || w.NextRetry.IsZero() ||
		strings.Contains(raw, "givesUpAt") {
		t.Fatalf("the information route: %s; want a log read waiting for the database, with its next retry and no give-up time", raw)
	}
	if strings.Contains(raw, "10.0.0.7") || w.Message == "" {
		t.Fatalf("the information route told the driver's words or nothing: %s", raw)
	}

	d.down.Store(false)
	res, err := http.Post(base+"/v1/processor/effector/f?op=retry&reason=database+back", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST ?op=retry: %d %s", res.StatusCode, b)
	}
	waitEffects(t, fx, []int64{1, 2, 3}) // the fake clock never moved
	waitFor(t, func() bool { _, w := info(); return w == nil })
}

// TestAFailingPatternEngineIsNotClosedAsIdle: an engine of a pattern whose ProcessEvent keeps
// failing has work — the failing event and what waits behind it — and its retry armed. The idle
// sweep does not close it (closed, nothing would retry it until the stream's next event): once
// the cause is fixed, its retry processes the event with no append to wake it.
func TestAFailingPatternEngineIsNotClosedAsIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"), clk)
	t.Cleanup(func() { s.Close(context.Background()) })
	const idle = 100 * time.Millisecond
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	p := newFlaky(t)
	if err := host.RegisterPattern(ctx, h, "/*", foldstream.Processor[countState](p)); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	bad, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	// The opening catch-up that failed let the engine go: nothing uses it now.
	waitFor(t, func() bool { return h.SlotRefs("/f", "flaky") == 0 })
	// Idle sweeps, up to just before the retry: the engine stays open.
	sweepUntil(t, h, clk, idle, start.Add(host.FailRetryBase))
	if n := h.OpenPatternEngines(); n != 1 {
		t.Fatalf("%d pattern engines open after the idle sweeps; want the failing one", n)
	}
	p.broken.Store(false)
	clk.Advance(host.FailRetryBase)
	waitFor(t, func() bool { return statusOf(t, h, "/f", "flaky").Offset >= bad[0].Offset })
	if st := statusOf(t, h, "/f", "flaky"); st.Failing != nil {
		t.Fatalf("status after the fixed retry: %+v, want running", st)
	}
}
