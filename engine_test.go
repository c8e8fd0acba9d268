package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

func setupCounter(t *testing.T) (*counter, *testsupport.MemoryStream, *testsupport.Checkpoints, *foldstream.Engine[counterState]) {
	t.Helper()
	c := newCounter(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[counterState](t, c, mem, cps)
	return c, mem, cps, eng
}

func TestP08_SerialChainAndBarrier(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	for range 3 {
		appendT(t, mem, ev(tickType))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1", "start 2", "start 3"})
	tr := c.trace.get()
	var dones []string
	for _, s := range tr {
		if strings.HasPrefix(s, "blocked-done") {
			dones = append(dones, s)
		}
	}
	eq(t, "dones", dones, []string{"blocked-done 1", "blocked-done 2", "blocked-done 3"})
	for n := 1; n < 3; n++ {
		if slices.Index(tr, fmt.Sprintf("start %d", n+1)) < slices.Index(tr, fmt.Sprintf("blocked-done %d", n)) {
			t.Errorf("start %d before blocked-done %d: %v", n+1, n, tr)
		}
	}
}

func TestP09_BackgroundIsNotAwaited(t *testing.T) {
	t.Parallel()
	order := &rec[string]{}
	release := make(chan struct{})
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "bg", "1", "e")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			off := a.Event.Offset
			order.add(fmt.Sprintf("fg %d", off))
			a.RunInBackground(func(context.Context) error {
				<-release
				time.Sleep(time.Duration(20*(3-off)) * time.Millisecond) // bg 2 may overtake bg 1
				order.add(fmt.Sprintf("bg %d", off))
				return nil
			})
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nState](t, p, mem, cps)
	appendT(t, mem, ev("e"), ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t))) // returns while both attempts are still blocked
	eq(t, "foreground", order.get(), []string{"fg 1", "fg 2"})
	close(release)
	drain(t, eng)
	rest := order.get()[2:]
	slices.Sort(rest)
	eq(t, "background", rest, []string{"bg 1", "bg 2"})
}

func TestP10_OneCommitPerBatch(t *testing.T) {
	t.Parallel()
	_, mem, cps, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType), ev(tickType), ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "writes", cps.Writes(), 2)
}

func TestP11_AtHeadPassForUnconsumedEvent(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev("unrelated"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "trace", c.trace.get(), []string{"at-head ticks=0"})
}

func TestP12_CatchUpTwiceReducesOnce(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1"})
}

func TestP13_FailedPushPersistsNothingAndIsRetried(t *testing.T) {
	t.Parallel()
	type seen struct {
		Seen int `json:"seen"`
	}
	attempts := 0
	c := must[*foldstream.Contract[seen]](t)(foldstream.DefineContract(foldstream.ContractConfig[seen]{Slug: "flaky", Version: "1", Consumes: []string{"e"}}))
	p := &fn[seen]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[seen]) (seen, bool, error) { return seen{a.State.Seen + 1}, true, nil },
		process: func(a *foldstream.ProcessEventArgs[seen]) error {
			if a.Event == nil {
				return nil
			}
			a.BlockProcessorWhile(func(context.Context) error {
				attempts++
				if attempts == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[seen](t, p, mem, cps)
	mem.Register(eng)
	appendT(t, mem, ev("e"))
	settle(t, mem)
	if _, ok := cps.Get("flaky"); ok {
		t.Fatal("a checkpoint row exists after the failed push")
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "attempts", attempts, 2)
	eq(t, "state", must[foldstream.Snapshot[seen]](t)(eng.Snapshot(ctxFor(t))).State, seen{1})
}

func TestP14_ContiguousPushReadsNothing(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1"})
	eq(t, "reads", mem.Reads(), 0)
}

func TestP15_GappedPushRepairsFromTheLog(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	appendT(t, mem, ev(tickType))
	eng := newEngine[counterState](t, c, mem, cps)
	mem.Register(eng)
	appendT(t, mem, ev(tickType))
	settle(t, mem)
	eq(t, "starts", c.starts(), []string{"start 1", "start 2"})
	if mem.Reads() == 0 {
		t.Error("reads == 0: the gap was not repaired from the log")
	}
}

func TestP16_StalePushReducesNothing(t *testing.T) {
	t.Parallel()
	c, mem, _, eng := setupCounter(t)
	ctx := ctxFor(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.CatchUpFromLog(ctx))
	mustDo(t, eng.ProcessEventBatch(ctx, nil, foldstream.ScannedRange{After: 0, Through: 1}))
	eq(t, "starts", c.starts(), []string{"start 1"})
}

func TestP17_BackToBackPushesDeliverOneCaughtUp(t *testing.T) {
	t.Parallel()
	p := newProbe(t)
	// Hold the chain busy in a catch-up read, so both pushes are queued before the first runs
	// (upstream queues them in one synchronous turn).
	entered, release := make(chan struct{}), make(chan struct{})
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) {
		close(entered)
		<-release
		return foldstream.ReadPage{AtHead: true}, nil
	}}
	eng := newEngine[nState](t, p, st, testsupport.MemoryCheckpoints())
	ctx := ctxFor(t)
	catchUp := make(chan error, 1)
	go func() { catchUp <- eng.CatchUpFromLog(ctx) }()
	<-entered
	w1 := eng.QueueEventBatch(ctx, []foldstream.Event{committed(1, "a")}, foldstream.ScannedRange{After: 0, Through: 1})
	w2 := eng.QueueEventBatch(ctx, []foldstream.Event{committed(2, "a")}, foldstream.ScannedRange{After: 1, Through: 2})
	close(release)
	mustDo(t, <-catchUp)
	mustDo(t, w1(ctx))
	mustDo(t, w2(ctx))
	eq(t, "caughtUps", p.count(), 1)
	eq(t, "state", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx)).State, nState{2})
}

func TestP18_OnePushDeliversCaughtUp(t *testing.T) {
	t.Parallel()
	p := newProbe(t)
	eng := newEngine[nState](t, p, &stubStream{}, testsupport.MemoryCheckpoints())
	mustDo(t, eng.ProcessEventBatch(ctxFor(t), []foldstream.Event{committed(1, "a")}, foldstream.ScannedRange{After: 0, Through: 1}))
	eq(t, "caughtUps", p.count(), 1)
}

func TestP19_FedEngineReadsTheLogOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fedAndRow bool
		reads     int
	}{{"fed and row-pushed", true, 1}, {"not fed", false, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
			appendT(t, mem, ev("counted"))
			var mods []func(*foldstream.EngineConfig)
			if tc.fedAndRow {
				mods = append(mods, fed)
			}
			eng := newEngine[ledgerState](t, newLedger(t), mem, cps, mods...)
			if tc.fedAndRow {
				defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
			}
			ctx := ctxFor(t)
			for i := range 5 {
				appendT(t, mem, ev("noise"))
				s := must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
				eq(t, fmt.Sprintf("snapshot %d", i), s.State, ledgerState{Counted: []int64{1}})
			}
			eq(t, "reads", mem.Reads(), tc.reads)
		})
	}
}

func TestP20_SnapshotBeforeThePushRan(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	ledger := newLedger(t)
	release := make(chan struct{})
	ledger.process = func(a *foldstream.ProcessEventArgs[ledgerState]) error {
		if a.Event != nil && a.Event.Offset == 2 {
			a.BlockProcessorWhile(func(context.Context) error { <-release; return nil })
		}
		return nil
	}
	eng := newEngine[ledgerState](t, ledger, mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	eq(t, "empty", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{}})
	reads := mem.Reads()
	appendT(t, mem, ev("noise"), ev("counted"))
	// The push is held in its blocker, so the snapshot is issued before the push ran: it must
	// queue a catch-up behind it rather than answer the stale state.
	snap := make(chan foldstream.Snapshot[ledgerState], 1)
	go func() { s, _ := eng.Snapshot(ctx); snap <- s }()
	for eng.Pending() < 2 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	eq(t, "next", (<-snap).State, ledgerState{Counted: []int64{2}})
	eq(t, "extra reads", mem.Reads()-reads, 1)
	settle(t, mem)
	got := appendT(t, mem, ev("counted"))
	eq(t, "offset of the third append (the delta took 3)", got[0].Offset, int64(4))
	settle(t, mem)
	reads = mem.Reads()
	eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{2, 4}})
	live := must[foldstream.LiveSnapshot](t)(eng.LiveSnapshot(ctx))
	jsonEq(t, "live", live.State, `{"counted":[2,4]}`)
	eq(t, "no further read", mem.Reads(), reads)
}

func TestP21_SnapshotBehindASlowPush(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t, 1), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
	appendT(t, mem, ev("counted"))
	appendT(t, mem, ev("counted"))
	eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{1, 2}})
	settle(t, mem)
	eq(t, "later", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State, ledgerState{Counted: []int64{1, 2}})
}

func TestP22_SnapshotsArePrefixesAndComplete(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t, 4, 10), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng, []string{"counted"})()
	ctx := ctxFor(t)
	var counted []int64
	for i := 1; i <= 24; i++ {
		typ := "counted"
		if i%3 == 0 {
			typ = "noise"
		}
		got := appendT(t, mem, ev(typ))
		if typ == "counted" {
			counted = append(counted, got[0].Offset)
		}
		if i%2 == 0 {
			s := must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State.Counted
			if len(s) < len(counted) || !slices.Equal(s[:len(counted)], counted) || len(s) > len(counted) {
				t.Fatalf("after append %d: snapshot %v, want exactly the counted offsets %v", i, s, counted)
			}
		}
		if i%5 == 0 {
			settle(t, mem)
		}
	}
	settle(t, mem)
	eq(t, "final", must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx)).State.Counted, counted)
}

func TestP23_CheckpointAcrossIncarnations(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[ledgerState](t, newLedger(t), mem, cps, fed)
	unsub := testsupport.PushedByARow(mem, eng, []string{"counted"})
	ctx := ctxFor(t)
	must[foldstream.Snapshot[ledgerState]](t)(eng.Snapshot(ctx))
	appendT(t, mem, ev("noise"), ev("counted"))
	settle(t, mem)
	eq(t, "writes", cps.Writes(), 1)
	cp, _ := cps.Get("ledger")
	eq(t, "checkpoint", []any{cp.ReducerVersion, cp.ReducedThroughOffset, string(cp.State)}, []any{"1", int64(2), `{"counted":[2]}`})
	unsub()
	got := appendT(t, mem, ev("counted"), ev("noise"), ev("counted"))
	eq(t, "offsets", []int64{got[0].Offset, got[2].Offset}, []int64{4, 6})
	eng2 := newEngine[ledgerState](t, newLedger(t), mem, cps, fed)
	defer testsupport.PushedByARow(mem, eng2, []string{"counted"})()
	reads := mem.Reads()
	for range 2 {
		eq(t, "snapshot", must[foldstream.Snapshot[ledgerState]](t)(eng2.Snapshot(ctx)),
			foldstream.Snapshot[ledgerState]{Offset: 6, State: ledgerState{Counted: []int64{2, 4, 6}}})
	}
	eq(t, "reads", mem.Reads()-reads, 1)
	cp, _ = cps.Get("ledger")
	eq(t, "checkpoint", []any{cp.ReducerVersion, cp.ReducedThroughOffset, string(cp.State)}, []any{"1", int64(6), `{"counted":[2,4,6]}`})
}

func TestP24_AtHeadJudgedAgainstPushesOnly(t *testing.T) {
	t.Parallel()
	for _, isFed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fed=%v", isFed), func(t *testing.T) {
			t.Parallel()
			st := &stubStream{read: func(after int64, _ int) (foldstream.ReadPage, error) {
				var evs []foldstream.Event
				for o := after + 1; o <= 3; o++ {
					evs = append(evs, committed(o, "a"))
				}
				return foldstream.ReadPage{Events: evs, ScannedThroughOffset: 3, AtHead: true}, nil
			}}
			p := newProbe(t)
			eng := newEngine[nState](t, p, st, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) { c.FedByPushes = isFed })
			ctx := ctxFor(t)
			must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctx))
			mustDo(t, eng.ProcessEventBatch(ctx, []foldstream.Event{committed(2, "a")}, foldstream.ScannedRange{After: 1, Through: 2}))
			eq(t, "caughtUps", p.count(), 2)
		})
	}
}

func newEph(t *testing.T, slug string, consumes ...string) *fn[seenState] {
	return &fn[seenState]{Base: foldstream.NewBase(seenContract(t, slug, consumes...)), reduce: appendSeen, project: projectNull[seenState]}
}

func TestP25_EphemeralsOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	cpsE, cpsS := testsupport.MemoryCheckpoints(), testsupport.MemoryCheckpoints()
	e := newEngine[seenState](t, newEph(t, "eph", "loud", "chunk"), mem, cpsE)
	s := newEngine[seenState](t, newEph(t, "star", "*"), mem, cpsS)
	mem.Register(e)
	mem.Register(s)
	ctx := ctxFor(t)
	appendT(t, mem, ev("loud"))
	settle(t, mem)
	we, ws := cpsE.Writes(), cpsS.Writes()
	appendT(t, mem, eph("chunk"))
	appendT(t, mem, eph("chunk"))
	settle(t, mem)
	eq(t, "eph", must[foldstream.Snapshot[seenState]](t)(e.Snapshot(ctx)).State.Seen, []string{"loud@1", "chunk@2", "chunk@3"})
	eq(t, "star", must[foldstream.Snapshot[seenState]](t)(s.Snapshot(ctx)).State.Seen, []string{"loud@1"})
	eq(t, "writes", []int{cpsE.Writes(), cpsS.Writes()}, []int{we, ws})
	appendT(t, mem, ev("loud"))
	settle(t, mem)
	eq(t, "star", must[foldstream.Snapshot[seenState]](t)(s.Snapshot(ctx)).State.Seen, []string{"loud@1", "loud@4"})
}

func TestP26_PushBehindTheCursorStillDeliversEphemerals(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	e := newEngine[seenState](t, newEph(t, "eph", "loud", "chunk"), mem, cps)
	ctx := ctxFor(t)
	appendT(t, mem, ev("loud"))
	mustDo(t, e.CatchUpFromLog(ctx))
	evs := appendT(t, mem, ev("loud"), eph("chunk"))
	mustDo(t, e.WaitUntilProcessed(ctx, 3, 2*time.Second))
	mustDo(t, e.ProcessEventBatch(ctx, evs, foldstream.ScannedRange{After: 1, Through: 3}))
	eq(t, "state", must[foldstream.Snapshot[seenState]](t)(e.Snapshot(ctx)).State.Seen, []string{"loud@1", "loud@2", "chunk@3"})
}

func TestP27_AppendInsideABlockerDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "echoer", Version: "1", Consumes: []string{"ping"}, Emits: []string{"echoed"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				_, err := a.Append(ctx, foldstream.EventInput{Type: "echoed", IdempotencyKey: "once"})
				return err
			})
		}
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("ping"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mustDo(t, mem.WaitIdle(ctx))
	if len(mem.EventsOfType("echoed")) != 1 {
		t.Fatalf("echoed not in the log: %v", mem.Events())
	}
}

func TestP28_VersionBumpReReducesWithoutEffects(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mk := func(version string, effects *rec[int64]) *fn[nState] {
		return &fn[nState]{Base: foldstream.NewBase(nContract(t, "reduce", version, tickType)), reduce: incN,
			process: func(a *foldstream.ProcessEventArgs[nState]) error {
				if a.Event != nil {
					effects.add(a.Event.Offset)
				}
				return nil
			}}
	}
	effects := &rec[int64]{}
	ctx := ctxFor(t)
	v1 := newEngine[nState](t, mk("1.0.0", effects), mem, cps)
	appendT(t, mem, ev(tickType), ev(tickType))
	mustDo(t, v1.CatchUpFromLog(ctx))
	eq(t, "v1 effects", len(effects.get()), 2)
	v2 := newEngine[nState](t, mk("2.0.0", effects), mem, cps)
	eq(t, "v2 state", must[foldstream.Snapshot[nState]](t)(v2.Snapshot(ctx)).State, nState{2})
	eq(t, "effects", len(effects.get()), 2)
}

func TestP29_MilestoneEmittedOnceWithProvenance(t *testing.T) {
	t.Parallel()
	_, mem, _, eng := setupCounter(t)
	mem.Register(eng)
	appendT(t, mem, ev(tickType), ev(tickType), ev(tickType), ev(tickType))
	ctx := ctxFor(t)
	mustDo(t, eng.CatchUpFromLog(ctx))
	settle(t, mem)
	ms := mem.EventsOfType(milestoneType)
	if len(ms) != 1 {
		t.Fatalf("milestones: got %d, want 1", len(ms))
	}
	jsonEq(t, "payload", ms[0].Payload, `{"at":3}`)
	src := ms[0].Source
	if src == nil || src.Processor == nil || src.Processor.Slug != "counter" || src.Processor.Version != "1.0.0" ||
		src.Processor.WhileProcessing == nil || src.Processor.WhileProcessing.Offset != 3 || src.Processor.WhileProcessing.Type != tickType {
		t.Errorf("source: got %+v", src)
	}
	mustDo(t, eng.CatchUpFromLog(ctx))
	settle(t, mem)
	eq(t, "milestones after a second catch-up", len(mem.EventsOfType(milestoneType)), 1)
}

func TestP30_UndeclaredEmitFailsTheBatch(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{Slug: "rogue", Version: "1"}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				_, err := a.Append(ctx, ev("ok"), ev("not-declared"))
				return err
			})
		}
		return nil
	}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("x"))
	err := eng.CatchUpFromLog(ctxFor(t))
	if err == nil || err.Error() != `processor "rogue" emits "ok" without declaring it` {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, foldstream.ErrUndeclaredEmit) {
		t.Errorf("code %q", foldstream.CodeOf(err))
	}
	eq(t, "nothing appended", len(mem.Events()), 1)
	eq(t, "cursor", eng.ReducedThroughOffset(), int64(0))
}

func TestP31_WaitUntilProcessed(t *testing.T) {
	t.Parallel()
	_, mem, _, eng := setupCounter(t)
	appendT(t, mem, ev(tickType))
	mustDo(t, eng.WaitUntilProcessed(ctxFor(t), 1, time.Second))
}

type tallyState struct {
	Count  int    `json:"count"`
	Secret string `json:"secret"`
}

func newTally(t *testing.T) *fn[tallyState] {
	c := must[*foldstream.Contract[tallyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[tallyState]{
		Slug: "tally", Version: "1", Consumes: []string{"tick"},
		Initial: func() (tallyState, error) { return tallyState{Secret: "hidden"}, nil }}))
	return &fn[tallyState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[tallyState]) (tallyState, bool, error) {
			s := a.State
			s.Count++
			return s, true, nil
		},
		project: func(s tallyState) (any, error) { return map[string]int{"count": s.Count}, nil }}
}

func setupTally(t *testing.T) (*testsupport.MemoryStream, *foldstream.Engine[tallyState]) {
	mem := testsupport.NewMemoryStream()
	eng := newEngine[tallyState](t, newTally(t), mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	return mem, eng
}

func TestP32_OneDeltaPerChange(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds := mem.EventsOfType(foldstream.LiveStateChangedType)
	if len(ds) != 1 {
		t.Fatalf("deltas: got %d, want 1", len(ds))
	}
	if !ds[0].Ephemeral {
		t.Error("delta is not ephemeral")
	}
	var p map[string]any
	_ = json.Unmarshal(ds[0].Payload, &p)
	jsonEq(t, "key+patch", foldstream.JSON(map[string]any{"key": p["key"], "patch": p["patch"]}),
		`{"key":"tally","patch":[{"op":"replace","path":"/count","value":1}]}`)
}

func TestP33_DeltaChain(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	for _, typ := range []string{"tick", "other", "tick"} {
		appendT(t, mem, ev(typ))
		settle(t, mem)
	}
	ds := deltas(mem)
	if len(ds) != 2 {
		t.Fatalf("deltas: got %d, want 2", len(ds))
	}
	eq(t, "chain", ds[1].From, ds[0].To)
}

func TestP34_LiveSnapshotIsTheProjection(t *testing.T) {
	t.Parallel()
	mem, eng := setupTally(t)
	appendT(t, mem, ev("other"))
	settle(t, mem)
	seed := must[foldstream.LiveSnapshot](t)(eng.LiveSnapshot(ctxFor(t)))
	eq(t, "seed state", string(seed.State), `{"count":0}`)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	ds := deltas(mem)
	if len(ds) == 0 {
		t.Fatal("no delta")
	}
	eq(t, "from", ds[0].From, seed.Rev)
}

func TestP35_EqualFreshProjectionEmitsNothing(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "flat", "1", "tick")), reduce: incN,
		project: func(nState) (any, error) { return map[string]bool{"steady": true}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "deltas", len(deltas(mem)), 0)
}

func TestP36_NoProcessorReducesADelta(t *testing.T) {
	t.Parallel()
	mem, _ := setupTally(t)
	sneaky := &fn[nState]{Base: foldstream.NewBase(nContract(t, "sneaky", "1", "*", foldstream.LiveStateChangedType)), reduce: incN, project: projectNull[nState]}
	s := newEngine[nState](t, sneaky, mem, testsupport.MemoryCheckpoints())
	mem.Register(s)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "deltas", len(deltas(mem)), 1)
	eq(t, "sneaky", must[foldstream.Snapshot[nState]](t)(s.Snapshot(ctxFor(t))).State, nState{1})
}

func TestP38_RuntimeFieldInTheProjection(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "runtime", Version: "1", Consumes: []string{"tick"}}))
	var last int64 // written and read on the engine's chain only
	p := &fn[emptyState]{Base: foldstream.NewBase(c),
		process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
			if a.Event != nil {
				last = a.Event.Offset
			}
			return nil
		},
		project: func(emptyState) (any, error) { return map[string]any{"lastSeenOffset": last}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[emptyState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"), ev("tick"))
	settle(t, mem)
	ds := deltas(mem)
	if len(ds) != 1 {
		t.Fatalf("deltas: got %d, want 1", len(ds))
	}
	eq(t, "key", ds[0].Key, "runtime")
	jsonEq(t, "patch", foldstream.JSON(ds[0].Patch), `[{"op":"replace","path":"/lastSeenOffset","value":2}]`)
}

func TestP39_KeptStateEmitsNothing(t *testing.T) {
	t.Parallel()
	fired := &rec[int64]{}
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "still", "1", "tick")),
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				fired.add(a.Event.Offset)
			}
			return nil
		}}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	appendT(t, mem, ev("tick"), ev("tick"))
	settle(t, mem)
	eq(t, "fired", len(fired.get()), 3)
	eq(t, "deltas", len(deltas(mem)), 0)
}

func TestP40_UnserializableProjection(t *testing.T) {
	t.Parallel()
	p := &fn[nState]{Base: foldstream.NewBase(nContract(t, "biggie", "1", "tick")), reduce: incN,
		project: func(s nState) (any, error) { return map[string]any{"n": s.N, "f": func() {}}, nil }}
	mem := testsupport.NewMemoryStream()
	eng := newEngine[nState](t, p, mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	eq(t, "snapshot", must[foldstream.Snapshot[nState]](t)(eng.Snapshot(ctxFor(t))).State, nState{1})
	eq(t, "deltas", len(deltas(mem)), 0)
}

func TestP41_EffectOnlyNeverReplaysAfterEviction(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, effects := newEffectOnly(t)
	eng := newEngine[emptyState](t, p, mem, cps)
	mem.Register(eng)
	for range 4 {
		appendT(t, mem, ev("x"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "effects", effects.get(), []int64{1, 2, 3, 4})
	cp, _ := cps.Get("eff")
	eq(t, "stored", []any{cp.ReducedThroughOffset, cp.State == nil}, []any{int64(4), true})
	p2, effects2 := newEffectOnly(t)
	eng2 := newEngine[emptyState](t, p2, mem, cps)
	mustDo(t, eng2.CatchUpFromLog(ctxFor(t)))
	eq(t, "new engine effects", effects2.get(), []int64(nil))
}

func TestP42_StateChangingProcessorNeverReplays(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, effects := newCount(t, "1.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	mem.Register(eng)
	for range 4 {
		appendT(t, mem, ev("tick"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	eq(t, "effects", effects.get(), []int64{1, 2, 3, 4})
	p2, effects2 := newCount(t, "1.0.0")
	eng2 := newEngine[ticksState](t, p2, mem, cps)
	mustDo(t, eng2.CatchUpFromLog(ctxFor(t)))
	eq(t, "new engine effects", effects2.get(), []int64(nil))
	eq(t, "state", must[foldstream.Snapshot[ticksState]](t)(eng2.Snapshot(ctxFor(t))).State, ticksState{4})
}

func TestP43_StaleRowWithoutStateAtCursorZero(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	mustDo(t, cps.WriteCheckpoint(context.Background(), "count", foldstream.Checkpoint{ReducerVersion: "1.0.0"}, false))
	p, _ := newCount(t, "2.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	eq(t, "snapshot", must[foldstream.Snapshot[ticksState]](t)(eng.Snapshot(ctxFor(t))), foldstream.Snapshot[ticksState]{Offset: 0, State: ticksState{0}})
}

func TestP44_WaitAfterVersionBumpHasNoEffects(t *testing.T) {
	t.Parallel()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	p, _ := newCount(t, "1.0.0")
	eng := newEngine[ticksState](t, p, mem, cps)
	unreg := mem.Register(eng)
	for range 3 {
		appendT(t, mem, ev("tick"))
	}
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	settle(t, mem)
	unreg()
	p2, effects2 := newCount(t, "2.0.0")
	eng2 := newEngine[ticksState](t, p2, mem, cps)
	mustDo(t, eng2.WaitUntilProcessed(ctxFor(t), 3, 2*time.Second))
	eq(t, "effects", effects2.get(), []int64(nil))
}

func TestP45_WaitTimesOut(t *testing.T) {
	t.Parallel()
	p, _ := newCount(t, "1.0.0")
	mem := testsupport.NewMemoryStream()
	eng := newEngine[ticksState](t, p, mem, testsupport.MemoryCheckpoints())
	appendT(t, mem, ev("tick"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	err := eng.WaitUntilProcessed(ctxFor(t), 5, 120*time.Millisecond)
	if err == nil || err.Error() != `processor "count" did not reach offset 5 in 120ms` {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, foldstream.ErrProcessTimeout) {
		t.Errorf("code %q", foldstream.CodeOf(err))
	}
}

func TestP46_WaitFailsPromptlyWithTheCatchUpError(t *testing.T) {
	t.Parallel()
	st := &stubStream{read: func(int64, int) (foldstream.ReadPage, error) {
		return foldstream.ReadPage{}, errors.New("self-pull read failed: boom")
	}}
	eng := newEngine[nState](t, newProbe(t), st, testsupport.MemoryCheckpoints())
	start := time.Now()
	err := eng.WaitUntilProcessed(ctxFor(t), 5, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v, want the read failure", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v: not prompt", d)
	}
}
