package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

func withKV(kv foldstream.KeyValue, codeID string) func(*foldstream.EngineConfig) {
	return func(c *foldstream.EngineConfig) {
		c.KeyValue, c.CodeID, c.Clock = kv, codeID, testsupport.NewFakeClock()
	}
}

func marker(t *testing.T, kv *testsupport.KeyValue) (foldstream.WorkStarted, bool) {
	t.Helper()
	raw, ok, _ := kv.Get(context.Background(), foldstream.WorkStartedKey)
	var m foldstream.WorkStarted
	if ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m, ok
}

// §17.1 acceptance (docs/engine.md#work-that-keeps-dying): work left in flight by a host that died
// is revived by six successive fresh hosts; the first four succeed and the fifth and sixth fail
// with PERMANENT_FAILURE; a host with other code resets the count.
func TestWorkThatKeepsDyingWithItsHostFailsPermanentlyOnTheFifthDeath(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	kv, cps, mem := testsupport.MemoryKeyValue(), testsupport.MemoryCheckpoints(), testsupport.NewMemoryStream()
	first := newAttempts(t)
	dying := newEngine[emptyState](t, first, mem, cps, withKV(kv, "g1"))
	t.Cleanup(func() { close(first.end(1)) }) // the attempt never settles while the test runs
	mem.Register(dying)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 && dying.ReducedThroughOffset() == 1 }, mem.Changed, dying.Changed)
	if m, ok := marker(t, kv); !ok || m != (foldstream.WorkStarted{Deaths: 0, CodeID: "g1"}) {
		t.Fatalf("marker after the attempt started: %+v %v, want {0 g1}", m, ok)
	}
	// The host dies with the attempt in flight: six fresh hosts revive the processor in turn.
	var got []string
	var last *foldstream.Engine[emptyState]
	var lastAttempts *attempts
	for i := range 6 {
		lastAttempts = newAttempts(t)
		last = newEngine[emptyState](t, lastAttempts, mem, cps, withKV(kv, "g1"))
		err := last.Revive(ctx)
		switch {
		case err == nil:
			got = append(got, "1")
		case errors.Is(err, foldtype.ErrPermanentFailure):
			got = append(got, string(foldtype.CodeOf(err)))
			if i == 4 && err.Error() != `processor "attempts": its work in flight died with its host 5 times, so it is not started again until the processor receives an event` {
				t.Errorf("message: %q", err)
			}
		default:
			t.Fatalf("revive %d: %v", i+1, err)
		}
		if m, _ := marker(t, kv); m.Deaths != i+1 { // counted when the fresh engine was built
			t.Errorf("after revive %d the marker counts %d deaths", i+1, m.Deaths)
		}
	}
	eq(t, "revives", got, []string{"1", "1", "1", "1", "PERMANENT_FAILURE", "PERMANENT_FAILURE"})
	st := last.Status()
	if st.WorkFailed == nil || st.WorkFailed.Code != foldtype.CodePermanentFailure {
		t.Fatalf("status after the failure: %+v, want WorkFailed", st)
	}
	// A new event revives it: the failure leaves the status.
	t.Cleanup(func() { close(lastAttempts.end(2)) })
	fresh := foldstream.Event{Type: "e", Offset: 2, Path: "/", CreatedAt: testsupport.EpochCreatedAt}
	claims := len(mem.Claims())
	if err := last.ProcessEventBatch(ctx, []foldstream.Event{fresh}, foldstream.ScannedRange{After: 1, Through: 2}); err != nil {
		t.Fatal(err)
	}
	// Its attempt's marker and claim land before the next host starts.
	waitUntil(t, "the new attempt's claim", func() bool { return len(mem.Claims()) > claims }, mem.Changed)
	if st := last.Status(); st.WorkFailed != nil {
		t.Fatalf("status after a new event: %+v", st.WorkFailed)
	}
	// A new build is not the code that died: its revive resets the count and succeeds.
	if err := newEngine[emptyState](t, newAttempts(t), mem, cps, withKV(kv, "g2")).Revive(ctx); err != nil {
		t.Fatalf("revive on new code: %v", err)
	}
	if m, ok := marker(t, kv); !ok || m != (foldstream.WorkStarted{Deaths: 0, CodeID: "g2"}) {
		t.Fatalf("marker after new code: %+v %v, want {0 g2}", m, ok)
	}
}

// §17.1: the marker is written before the claim and deleted when the last attempt settles, so a
// settled attempt is never counted as a death.
func TestSettlingAttemptDeletesTheWorkStartedMarker(t *testing.T) {
	t.Parallel()
	kv, mem := testsupport.MemoryKeyValue(), testsupport.NewMemoryStream()
	a := newAttempts(t)
	eng := newEngine[emptyState](t, a, mem, testsupport.MemoryCheckpoints(), withKV(kv, "g1"))
	mem.Register(eng)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 }, mem.Changed)
	if _, ok := marker(t, kv); !ok {
		t.Fatal("no marker once the claim landed")
	}
	close(a.end(1))
	drain(t, eng)
	waitUntil(t, "the release", func() bool { c := mem.Claims(); return len(c) == 2 && c[1].IsZero() }, mem.Changed)
	if keys := kv.Keys(); len(keys) != 0 {
		t.Fatalf("keys after the attempt settled: %v", keys)
	}
	if err := eng.Revive(ctxFor(t)); err != nil {
		t.Fatalf("revive after a settled attempt: %v", err)
	}
	if keys := kv.Keys(); len(keys) != 0 {
		t.Fatalf("a revive after a settled attempt counted a death: %v", keys)
	}
}

// docs/engine.md#work-that-keeps-dying: work that Close cancelled did not die with its host — its
// marker goes, its claim stays for the next incarnation — so closing an engine (an idle close, a
// handoff, a graceful shutdown) never counts as a death.
func TestClosingAnEngineIsNotADeathOfItsWork(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "worker", Version: "1", Consumes: []string{"e"}}))
	p := &fn[emptyState]{Base: foldstream.NewBase(c), process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
		if a.Event != nil {
			a.RunInBackground(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		}
		return nil
	}}
	kv, mem, cps := testsupport.MemoryKeyValue(), testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[emptyState](t, p, mem, cps, withKV(kv, "g1"))
	mem.Register(eng)
	appendT(t, mem, ev("e"))
	waitUntil(t, "the claim", func() bool { return len(mem.Claims()) == 1 }, mem.Changed)
	if _, ok := marker(t, kv); !ok {
		t.Fatal("no marker while the work runs")
	}
	mustDo(t, eng.Close(ctxFor(t)))
	if keys := kv.Keys(); len(keys) != 0 {
		t.Fatalf("keys after Close: %v, want the marker gone", keys)
	}
	if cl := mem.Claims(); len(cl) != 1 || cl[0].IsZero() {
		t.Fatalf("claims after Close: %v, want the claim kept", cl)
	}
	next := newEngine[emptyState](t, p, mem, cps, withKV(kv, "g1"))
	if _, ok := marker(t, kv); ok {
		t.Fatal("the next engine counted a death")
	}
	mustDo(t, next.Close(ctxFor(t)))
}
