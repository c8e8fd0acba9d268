package host_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

// The processor contract's acceptance cases (docs/engine.md) re-run with the real store and the default host in place of the
// in-memory stand-in and pushedByARow. Offsets differ from upstream by the birth batch (created@1,
// woken@2) that the host's wake adds before any test event.

// countingStream counts reads of the store's event view.
type countingStream struct {
	*stream.EventStream
	reads atomic.Int64
}

func (c *countingStream) Read(ctx context.Context, after int64, limit int) (foldtype.ReadPage, error) {
	c.reads.Add(1)
	return c.EventStream.Read(ctx, after, limit)
}

type ledgerState struct {
	Counted []int64 `json:"counted"`
}

type ledger struct{ foldstream.Base[ledgerState] }

func (p *ledger) Reduce(a foldstream.ReduceArgs[ledgerState]) (ledgerState, bool, error) {
	return ledgerState{Counted: append(slices.Clone(a.State.Counted), a.Event.Offset)}, true, nil
}

// ProjectLiveState is null, so no live-state delta takes an offset between the test's appends.
func (p *ledger) ProjectLiveState(ledgerState) (any, error) { return nil, nil }

func addLedger(t *testing.T, ctx context.Context, s *stream.Store, h *host.Host, path string) (*countingStream, *foldstream.Engine[ledgerState]) {
	t.Helper()
	c, err := foldstream.DefineContract(foldstream.ContractConfig[ledgerState]{Slug: "ledger", Version: "1", Consumes: []string{"counted"}})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStream{EventStream: s.Events().Stream(path).ForProcessor("ledger")}
	cps, err := s.Events().Checkpoints(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := foldstream.NewEngine[ledgerState](&ledger{Base: foldstream.NewBase(c)}, foldstream.EngineConfig{
		Stream: cs, Checkpoints: cps, FedByPushes: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Add(ctx, path, eng); err != nil {
		t.Fatal(err)
	}
	return cs, eng
}

func ledgerSnapshot(t *testing.T, ctx context.Context, h *host.Host, path string) (int64, []int64) {
	t.Helper()
	snap, err := h.Snapshot(ctx, path, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	var st ledgerState
	if err := json.Unmarshal(snap.State, &st); err != nil {
		t.Fatal(err)
	}
	return snap.Offset, st.Counted
}

// P-19 on the store: a fed-by-pushes engine answers five snapshots, each after an unconsumed
// append, without reading the log again after its registration's catch-up (which runs in the
// background; the first snapshot waits for it).
func TestFedEngineReadsTheLogOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	if _, err := s.Events().Stream("/l").Append(ctx, foldtype.EventInput{Type: "counted"}); err != nil { // before the engine exists: @1
		t.Fatal(err)
	}
	h := newHost(t, s)
	cs, _ := addLedger(t, ctx, s, h, "/l")
	for range 5 {
		if _, err := s.Events().Stream("/l").Append(ctx, foldtype.EventInput{Type: "noise"}); err != nil {
			t.Fatal(err)
		}
		if _, counted := ledgerSnapshot(t, ctx, h, "/l"); !slices.Equal(counted, []int64{1}) {
			t.Fatalf("counted: got %v, want [1]", counted)
		}
	}
	if got := cs.reads.Load(); got != 1 {
		t.Fatalf("reads: got %d, want 1 (the registration's catch-up, and no read after it)", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// P-20/P-23 on the store: a snapshot straight after an append reflects it; a range with a consumed
// event writes the checkpoint once; a new engine on the same file resumes from it with one read.
func TestCheckpointAndResumeOnTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	addLedger(t, ctx, s, h, "/l")
	if _, err := s.Events().Stream("/l").Append(ctx, foldtype.EventInput{Type: "noise"}, foldtype.EventInput{Type: "counted"}); err != nil { // 3, 4
		t.Fatal(err)
	}
	if off, counted := ledgerSnapshot(t, ctx, h, "/l"); off != 4 || !slices.Equal(counted, []int64{4}) {
		t.Fatalf("snapshot: got %d %v, want 4 [4]", off, counted)
	}
	cps, _ := s.Events().Checkpoints(ctx, "/l")
	cp, ok, err := cps.ReadCheckpoint(ctx, "ledger")
	if err != nil || !ok || cp.ReducedThroughOffset != 4 || string(cp.State) != `{"counted":[4]}` || cp.ReducerVersion != "1" {
		t.Fatalf("checkpoint: got %+v %v %v", cp, ok, err)
	}
	if err := h.Remove(ctx, "/l", "ledger"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/l").Append(ctx, foldtype.EventInput{Type: "counted"}, foldtype.EventInput{Type: "noise"}, foldtype.EventInput{Type: "counted"}); err != nil { // 5..7
		t.Fatal(err)
	}
	cs, _ := addLedger(t, ctx, s, h, "/l")
	for range 2 {
		if off, counted := ledgerSnapshot(t, ctx, h, "/l"); off != 7 || !slices.Equal(counted, []int64{4, 5, 7}) {
			t.Fatalf("resumed snapshot: got %d %v, want 7 [4 5 7]", off, counted)
		}
	}
	if got := cs.reads.Load(); got != 1 {
		t.Fatalf("reads of the resumed engine: got %d, want 1", got)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// P-27 on the store: a processor whose blocker awaits its own append does not deadlock — the
// store's push back to the engine is fire-and-forget.
type echoer struct{ foldstream.Base[struct{}] }

func (p *echoer) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil || a.Event.Type != "ping" {
		return nil
	}
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldtype.EventInput{Type: "echoed", IdempotencyKey: "once"})
		return err
	})
	return nil
}

// Acceptance case P-27 (docs/engine.md#acceptance-cases).
func TestAppendInsideBlockerOnTheStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	c, err := foldstream.DefineContract(foldstream.ContractConfig[struct{}]{Slug: "echoer", Version: "1", Consumes: []string{"ping", "echoed"}, Emits: []string{"echoed"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/e", &echoer{Base: foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	echoes := make(chan foldtype.Event, 1)
	sub, err := s.Events().Subscribe("/e", func(_ context.Context, evs []foldtype.Event, _ foldtype.ScannedRange) error {
		for _, ev := range evs {
			select {
			case echoes <- ev:
			default: // the first one is enough
			}
		}
		return nil
	}, stream.SubscribeOptions{Consumes: []string{"echoed"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ping, err := s.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "ping"})
	if err != nil {
		t.Fatal(err)
	}
	var echoed foldtype.Event
	select {
	case echoed = <-echoes:
	case <-ctx.Done():
		t.Fatalf("echoed never landed: %v", ctx.Err())
	}
	if echoed.Type != "echoed" || echoed.Offset <= ping[0].Offset {
		t.Fatalf("echo: got %s@%d, want echoed after ping@%d", echoed.Type, echoed.Offset, ping[0].Offset)
	}
	if err := h.WaitUntilProcessed(ctx, "/e", "echoer", echoed.Offset, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
