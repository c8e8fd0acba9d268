package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// weighState is the weigher's fold: how many ticks and the sum of their offsets times the weight.
type weighState struct {
	N   int   `json:"n"`
	Sum int64 `json:"sum"`
}

// weigher folds "tick" events with a weight an operator can change (a reducer fixed without a
// version bump), counts its ProcessEvent effects per offset and emits a keyed "milestone" for
// every third offset.
type weigher struct {
	foldstream.Base[weighState]
	weight  atomic.Int64
	mu      sync.Mutex
	effects map[int64]int
}

func newWeigher(t testing.TB) *weigher {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[weighState]{
		Slug: "weigher", Version: "1", Consumes: []string{"tick"}, Emits: []string{"milestone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &weigher{Base: foldstream.NewBase(c), effects: map[int64]int{}}
	p.weight.Store(1)
	return p
}

func (p *weigher) Reduce(a foldstream.ReduceArgs[weighState]) (weighState, bool, error) {
	return weighState{N: a.State.N + 1, Sum: a.State.Sum + a.Event.Offset*p.weight.Load()}, true, nil
}

func (p *weigher) ProcessEvent(a *foldstream.ProcessEventArgs[weighState]) error {
	if a.Event == nil {
		return nil
	}
	p.mu.Lock()
	p.effects[a.Event.Offset]++
	p.mu.Unlock()
	if off := a.Event.Offset; off%3 == 0 {
		a.BlockProcessorWhile(func(ctx context.Context) error {
			_, err := a.Append(ctx, foldtype.EventInput{Type: "milestone", Payload: foldtype.JSON(map[string]int64{"at": off}),
				IdempotencyKey: p.IdempotencyKey("milestone", a.Event)})
			return err
		})
	}
	return nil
}

// effectCounts returns how many times ProcessEvent ran for each offset.
func (p *weigher) effectCounts() map[int64]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int64]int, len(p.effects))
	for k, v := range p.effects {
		out[k] = v
	}
	return out
}

// replayBackends opens a store on SQLite and on PostgreSQL, one subtest each.
func replayBackends(t *testing.T, run func(t *testing.T, s *stream.Store)) {
	for _, b := range []string{"sqlite", "postgres"} {
		t.Run(b, func(t *testing.T) {
			dsn := filepath.Join(t.TempDir(), "replay.db")
			if b == "postgres" {
				dsn = pgtest.URL(t)
			}
			s, err := storeopen.Open(context.Background(), dsn, storeopen.Config{Store: stream.Config{Logger: quietLog}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			run(t, s)
		})
	}
}

// tickOffsets returns the offsets of the "tick" and "milestone" events in the log of path.
func tickOffsets(t testing.TB, s *stream.Store, path string) (ticks, milestones []int64) {
	t.Helper()
	var pos int64
	for {
		page, err := s.Events().Stream(path).Read(context.Background(), pos, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			switch ev.Type {
			case "tick":
				ticks = append(ticks, ev.Offset)
			case "milestone":
				milestones = append(milestones, ev.Offset)
			}
		}
		if page.ScannedThroughOffset <= pos || page.AtHead {
			return ticks, milestones
		}
		pos = page.ScannedThroughOffset
	}
}

// foldOf is the weigher's fold of ticks with weight w.
func foldOf(ticks []int64, w int64) weighState {
	var st weighState
	for _, off := range ticks {
		st = weighState{N: st.N + 1, Sum: st.Sum + off*w}
	}
	return st
}

// replayFixture registers a weigher on /r, appends n ticks and waits until it processed them all.
func replayFixture(t *testing.T, s *stream.Store, n int) (*host.Host, *weigher) {
	t.Helper()
	ctx := context.Background()
	h := newHost(t, s)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	p := newWeigher(t)
	if _, err := host.Register(ctx, h, "/r", p); err != nil {
		t.Fatal(err)
	}
	appendTicks(t, s, n)
	waitSettled(t, s, h, p)
	return h, p
}

func appendTicks(t testing.TB, s *stream.Store, n int) {
	t.Helper()
	for range n {
		if _, err := s.Events().Stream("/r").Append(context.Background(), foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSettled waits until the weigher has processed every tick in the log and its milestones are
// appended: its cursor reaches the head and stays there.
func waitSettled(t testing.TB, s *stream.Store, h *host.Host, p *weigher) {
	t.Helper()
	for range 100 {
		info, err := s.Events().HeadStream(context.Background(), "/r")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.WaitUntilProcessed(context.Background(), "/r", "weigher", info.Tail, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		again, err := s.Events().HeadStream(context.Background(), "/r")
		if err != nil {
			t.Fatal(err)
		}
		if again.Tail == info.Tail {
			return
		}
	}
	t.Fatal("the processor never settled")
}

func weighSnapshot(t testing.TB, h *host.Host) (int64, weighState) {
	t.Helper()
	snap, err := h.Snapshot(context.Background(), "/r", "weigher")
	if err != nil {
		t.Fatal(err)
	}
	var st weighState
	if err := json.Unmarshal(snap.State, &st); err != nil {
		t.Fatal(err)
	}
	return snap.Offset, st
}

// wantEffects checks that ProcessEvent ran for each tick as many times as want says (1 when absent).
func wantEffects(t testing.TB, p *weigher, ticks []int64, want func(off int64) int) {
	t.Helper()
	got := p.effectCounts()
	for _, off := range ticks {
		if got[off] != want(off) {
			t.Fatalf("ProcessEvent of offset %d ran %d times, want %d (all: %v)", off, got[off], want(off), got)
		}
	}
	if len(got) != len(ticks) {
		t.Fatalf("effects on %d offsets, want %d ticks: %v", len(got), len(ticks), got)
	}
}

// An operator's replay with effects off (the default) rebuilds a processor's state as the fold of
// its log — here with a reducer fixed since (the weight changed without a version bump) — and runs
// no ProcessEvent again: every effect ran once, no milestone was emitted twice, and events after
// the replay run once as new work. On SQLite and on PostgreSQL.
func TestAReplayWithEffectsOffRebuildsTheStateAndRunsNoEffectAgain(t *testing.T) {
	replayBackends(t, func(t *testing.T, s *stream.Store) {
		ctx := context.Background()
		h, p := replayFixture(t, s, 12)
		_, milestonesBefore := tickOffsets(t, s, "/r")
		p.weight.Store(2)
		res, err := h.Replay(ctx, "/r", "weigher", foldtype.ReplayRequest{From: 4})
		if err != nil {
			t.Fatal(err)
		}
		ticks, milestones := tickOffsets(t, s, "/r")
		if res.From != 4 || res.Effects != foldtype.ReplayEffectsNone || res.Through < ticks[len(ticks)-1] || res.Reduced != len(ticks) {
			t.Fatalf("replay answered %+v; the log holds ticks %v", res, ticks)
		}
		if _, st := weighSnapshot(t, h); st != foldOf(ticks, 2) {
			t.Fatalf("state after the replay %+v, want the fold %+v", st, foldOf(ticks, 2))
		}
		waitSettled(t, s, h, p)
		wantEffects(t, p, ticks, func(int64) int { return 1 })
		if !slices.Equal(milestones, milestonesBefore) {
			t.Fatalf("milestones %v after the replay, %v before", milestones, milestonesBefore)
		}
		// Later events are new work: they run once, folded with the fixed reducer.
		appendTicks(t, s, 3)
		waitSettled(t, s, h, p)
		ticks, _ = tickOffsets(t, s, "/r")
		wantEffects(t, p, ticks, func(int64) int { return 1 })
		if _, st := weighSnapshot(t, h); st != foldOf(ticks, 2) {
			t.Fatalf("state after new events %+v, want the fold %+v", st, foldOf(ticks, 2))
		}
	})
}

// A replay with effects again from offset N runs ProcessEvent once more for every event from N
// through the offset the processor had processed, and never for an earlier one; its keyed emits
// dedupe against the first run's (no milestone twice), and the state is the fold of the log. A
// replay from after the processed offset is refused with CONFLICT, a negative offset or an unknown
// effects choice with BAD_REQUEST, an unknown processor with NOT_REGISTERED. On SQLite and on
// PostgreSQL.
func TestAReplayWithEffectsAgainRunsEachEffectOfTheRangeOnceMore(t *testing.T) {
	replayBackends(t, func(t *testing.T, s *stream.Store) {
		ctx := context.Background()
		h, p := replayFixture(t, s, 12)
		ticks, milestonesBefore := tickOffsets(t, s, "/r")
		from := ticks[5]
		res, err := h.Replay(ctx, "/r", "weigher", foldtype.ReplayRequest{From: from, Effects: foldtype.ReplayEffectsAgain})
		if err != nil {
			t.Fatal(err)
		}
		if res.From != from || res.Effects != foldtype.ReplayEffectsAgain || res.Reduced != 5 {
			t.Fatalf("replay answered %+v, want from %d, effects again, 5 reduced", res, from)
		}
		// Nothing but the replay's catch-up runs the range again: no read, no wait.
		waitFor(t, func() bool { return p.effectCounts()[ticks[len(ticks)-1]] == 2 })
		waitSettled(t, s, h, p)
		wantEffects(t, p, ticks, func(off int64) int {
			if off >= from {
				return 2
			}
			return 1
		})
		_, milestones := tickOffsets(t, s, "/r")
		if !slices.Equal(milestones, milestonesBefore) {
			t.Fatalf("milestones %v after the replay, %v before", milestones, milestonesBefore)
		}
		if _, st := weighSnapshot(t, h); st != foldOf(ticks, 1) {
			t.Fatalf("state after the replay %+v, want the fold %+v", st, foldOf(ticks, 1))
		}

		for _, c := range []struct {
			req  foldtype.ReplayRequest
			slug string
			want error
		}{
			{foldtype.ReplayRequest{From: 10_000}, "weigher", foldtype.ErrConflict},
			{foldtype.ReplayRequest{From: -1}, "weigher", foldtype.ErrBadRequest},
			{foldtype.ReplayRequest{Effects: "twice"}, "weigher", foldtype.ErrBadRequest},
			{foldtype.ReplayRequest{}, "nobody", foldtype.ErrNotRegistered},
		} {
			if _, err := h.Replay(ctx, "/r", c.slug, c.req); !errors.Is(err, c.want) {
				t.Fatalf("replay %+v of %s: %v, want %v", c.req, c.slug, err, c.want)
			}
		}
	})
}

// A replay while a writer keeps appending loses nothing: every tick appended before, during and
// after the replays is processed, each effect runs once — twice only for the events a replay with
// effects again covered (from its From through its Through) — and the state is the fold of the
// whole log.
func TestAReplayWhileAppendsContinueLosesNothing(t *testing.T) {
	replayBackends(t, func(t *testing.T, s *stream.Store) {
		ctx := context.Background()
		h, p := replayFixture(t, s, 20)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Events().Stream("/r").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		var again []foldtype.ReplayResult
		for i := range 6 {
			req := foldtype.ReplayRequest{From: int64(1 + 3*i)}
			if i%2 == 1 {
				req.Effects = foldtype.ReplayEffectsAgain
			}
			res, err := h.Replay(ctx, "/r", "weigher", req)
			if err != nil {
				t.Fatalf("replay %d: %v", i, err)
			}
			if req.Effects == foldtype.ReplayEffectsAgain {
				again = append(again, res)
			}
		}
		close(stop)
		wg.Wait()
		waitSettled(t, s, h, p)
		ticks, _ := tickOffsets(t, s, "/r")
		wantEffects(t, p, ticks, func(off int64) int {
			n := 1
			for _, r := range again {
				if off >= r.From && off <= r.Through {
					n++
				}
			}
			return n
		})
		if _, st := weighSnapshot(t, h); st != foldOf(ticks, 1) {
			t.Fatalf("state %+v, want the fold of %d ticks %+v", st, len(ticks), foldOf(ticks, 1))
		}
		if len(ticks) <= 20 {
			t.Fatalf("only %d ticks: the writer appended nothing during the replays", len(ticks))
		}
		t.Logf("%d ticks, replays with effects again: %+v", len(ticks), again)
	})
}

// A replay of a failing processor runs its failing event again in the catch-up that follows, as a
// retry would: still broken, the processor stays failing and its reads answer PROCESSOR_FAILING;
// fixed, the next replay heals it and it processes what waited behind the event — the store's
// clock never moved, so no armed retry did it.
func TestAReplayOfAFailingProcessorHealsItOnceFixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "replay-failing.db"), clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	p := newFlaky(t)
	if _, err := host.Register(ctx, h, "/f", p); err != nil {
		t.Fatal(err)
	}
	// The stream's birth and wake records processed first: folded into the failing range, they
	// would leave the processor at offset 0, where a replay from the start finds nothing.
	info, err := s.Events().HeadStream(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/f", "flaky", info.Tail, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	got, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "bad"},
		foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	res, err := h.Replay(ctx, "/f", "flaky", foldtype.ReplayRequest{})
	if err != nil || res.Through >= got[1].Offset {
		t.Fatalf("replay of the failing processor: %+v %v, want through before %d", res, err, got[1].Offset)
	}
	if st := statusOf(t, h, "/f", "flaky"); st.Failing == nil {
		t.Fatalf("status after a replay still broken: %+v, want failing", st)
	}
	p.broken.Store(false)
	if _, err := h.Replay(ctx, "/f", "flaky", foldtype.ReplayRequest{}); err != nil {
		t.Fatal(err)
	}
	// Nothing but the replay's catch-up runs the processor now: no read, no wait, no retry.
	waitFor(t, func() bool {
		st := statusOf(t, h, "/f", "flaky")
		return st.State == foldtype.StateRunning && st.Offset >= got[2].Offset
	})
	if err := h.WaitUntilProcessed(ctx, "/f", "flaky", got[2].Offset, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if snap, err := h.Snapshot(ctx, "/f", "flaky"); err != nil || state(t, snap.State).Ticks != 3 {
		t.Fatalf("after the replay: %v %v, want 3 events reduced", snap.State, err)
	}
	if !clk.Now().Equal(start) {
		t.Fatalf("the clock moved: %v", clk.Now().Sub(start))
	}
}
