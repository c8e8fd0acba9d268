package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// receipts emits one "receipt" per "order", keyed by the order's offset.
type receipts struct{ foldstream.Base[struct{}] }

func newReceipts(t testing.TB) *receipts {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[struct{}]{
		Slug: "receipts", Version: "1", Consumes: []string{"order"}, Emits: []string{"receipt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &receipts{Base: foldstream.NewBase(c)}
}

func (p *receipts) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil {
		return nil
	}
	key := p.IdempotencyKey("receipt", a.Event)
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldtype.EventInput{Type: "receipt", IdempotencyKey: key,
			Payload: foldtype.JSON(map[string]int64{"order": a.Event.Offset})})
		return err
	})
	return nil
}

// Someone holding the key of a processor's own emitted event with another body parks that one
// processor with PROCESSOR_PARKED (the conflict attached), visible on its reads and status; the
// other processor on the stream keeps running, and a host restarted on the file registers and
// serves as before — the parked processor parks again, nothing fails.
func TestOwnKeyConflictParksOnlyThatProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "park.db")
	s := openStore(t, file, nil)
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/o", newReceipts(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/o", newSeer(t, "seen", "order")); err != nil {
		t.Fatal(err)
	}
	// The birth batch is at 1..2; the squatter takes the key the receipt of the order at 4 will use.
	squat := foldtype.EventInput{Type: "receipt", Payload: foldtype.JSON(map[string]string{"forged": "yes"}),
		IdempotencyKey: foldtype.ProcessorKeyPrefix + "receipts/receipt@4"}
	if got, err := s.Events().Stream("/o").Append(ctx, squat); err != nil || got[0].Offset != 3 {
		t.Fatalf("squat: %v %v", got, err)
	}
	if got, err := s.Events().Stream("/o").Append(ctx, foldtype.EventInput{Type: "order"}); err != nil || got[0].Offset != 4 {
		t.Fatalf("order: %v %v", got, err)
	}
	checkParked := func(h *host.Host) {
		t.Helper()
		_, err := h.Snapshot(ctx, "/o", "receipts")
		if !errors.Is(err, host.ErrProcessorParked) || !errors.Is(err, foldtype.ErrIdempotencyConflict) {
			t.Fatalf("snapshot of the squatted processor: got %v, want PROCESSOR_PARKED caused by IDEMPOTENCY_CONFLICT", err)
		}
		var fe *foldtype.Error
		if !errors.As(err, &fe) || fe.Data["slug"] != "receipts" || fe.Data["cause"] == "" {
			t.Fatalf("parked error data: %+v", fe)
		}
		var parked bool
		for _, st := range h.ProcessorsOn(ctx, "/o") {
			if st.Slug == "receipts" {
				parked = st.Parked != nil && st.Parked.Code == foldtype.CodeIdempotencyConflict && st.Parked.Message != ""
			}
		}
		if !parked {
			t.Fatalf("status does not show the parked processor: %+v", h.ProcessorsOn(ctx, "/o"))
		}
		snap, err := h.Snapshot(ctx, "/o", "seen")
		if err != nil {
			t.Fatalf("the other processor: %v", err)
		}
		if snap.Offset < 4 {
			t.Fatalf("the other processor stopped at %d", snap.Offset)
		}
	}
	checkParked(h)
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, file, nil)
	defer s2.Close(context.Background())
	h2 := newHost(t, s2)
	if _, err := host.Register(ctx, h2, "/o", newReceipts(t)); err != nil {
		t.Fatalf("register after a restart: %v", err)
	}
	if _, err := host.Register(ctx, h2, "/o", newSeer(t, "seen", "order")); err != nil {
		t.Fatal(err)
	}
	checkParked(h2)
	if err := h2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

type hoardState struct {
	Blob string `json:"blob"`
}

// hoard keeps every "hoard" event's "n" bytes in its state.
type hoard struct{ foldstream.Base[hoardState] }

func newHoard(t testing.TB) *hoard {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[hoardState]{Slug: "hoard", Version: "1", Consumes: []string{"hoard"}})
	if err != nil {
		t.Fatal(err)
	}
	return &hoard{Base: foldstream.NewBase(c)}
}

func (hoard) Reduce(a foldstream.ReduceArgs[hoardState]) (hoardState, bool, error) {
	var p struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(a.Event.Payload, &p); err != nil {
		return a.State, false, err
	}
	return hoardState{Blob: a.State.Blob + strings.Repeat("x", p.N)}, true, nil
}

// A reduced state too large to checkpoint (REDUCE_CHECKPOINT_TOO_LARGE, which the engine latches)
// parks that one processor, as a conflict on its own emitted event does: its reads answer
// PROCESSOR_PARKED naming the cause and what to do, its status says parked, and the other
// processor on the stream keeps going — instead of every read failing with the latched refusal
// (which the server answered 500 INTERNAL).
func TestAStateTooLargeToCheckpointParksItsProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/big", newHoard(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/big", newSeer(t, "seen", "hoard")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events().Stream("/big").Append(ctx, foldtype.EventInput{Type: "hoard",
		Payload: foldtype.JSON(map[string]int{"n": foldtype.MaxCheckpointChars + 1})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Snapshot(ctx, "/big", "hoard")
	var fe *foldtype.Error
	if !errors.Is(err, foldtype.ErrProcessorParked) || !errors.Is(err, foldtype.ErrReduceCheckpointTooLarge) || !errors.As(err, &fe) {
		t.Fatalf("snapshot: got %v, want PROCESSOR_PARKED caused by REDUCE_CHECKPOINT_TOO_LARGE", err)
	}
	if !strings.Contains(fe.Message, "too large to checkpoint") {
		t.Fatalf("message %q does not say what to do", fe.Message)
	}
	if st := statusOf(t, h, "/big", "hoard"); st.State != foldtype.StateParked || st.Parked == nil {
		t.Fatalf("status: %+v, want parked", st)
	}
	if err := h.WaitUntilProcessed(ctx, "/big", "seen", got[0].Offset, 5*time.Second); err != nil {
		t.Fatalf("the other processor: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
