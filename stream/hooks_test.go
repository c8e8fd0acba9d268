package stream

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// The kernel's hooks as a layer meets them (package kernel: hooks.go, hold.go). The layers register at open
// (layers.go); these tests register one more before the store's first write, which the write's
// queueing orders after the registration.

// An admission check's refusal refuses the whole batch before any message takes an offset.
func TestAdmissionCheckRefusesTheWholeBatch(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	refused := errors.New("refused by the layer")
	s.k.CheckAdmission(func(row *driver.Stream) func(p *kernel.Pending) error {
		return func(p *kernel.Pending) error {
			if row.Path == "/judged" && bytes.Contains(p.Body, []byte(`"type":"forbidden"`)) {
				return refused
			}
			return nil
		}
	})
	st := s.Events().Stream("/judged")
	if _, err := st.Append(ctx, ev("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, ev("b"), ev("forbidden")); !errors.Is(err, refused) {
		t.Fatalf("a batch with a refused message: got %v, want the check's error", err)
	}
	got, err := st.Append(ctx, ev("c"))
	if err != nil || got[0].Offset != 2 {
		t.Fatalf("the next append: got %+v %v, want offset 2 (the refused batch took none)", got, err)
	}
}

// An admission check judges a batch's fresh messages only: a message whose idempotency key names
// an event already stored is echoed as that event, even when the check would refuse it now.
func TestAdmissionCheckNeverJudgesADuplicate(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	refused := errors.New("refused by the layer")
	var strict atomic.Bool
	s.k.CheckAdmission(func(row *driver.Stream) func(p *kernel.Pending) error {
		return func(p *kernel.Pending) error {
			if strict.Load() && bytes.Contains(p.Body, []byte(`"type":"x"`)) {
				return refused
			}
			return nil
		}
	})
	st := s.Events().Stream("/dup")
	keyed := foldtype.EventInput{Type: "x", IdempotencyKey: "k1"}
	first, err := st.Append(ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	strict.Store(true)
	again, err := st.Append(ctx, keyed)
	if err != nil || len(again) != 1 || again[0].Offset != first[0].Offset {
		t.Fatalf("the duplicate under a check that refuses its type: got %+v %v, want the stored event at offset %d",
			again, err, first[0].Offset)
	}
	if _, err := st.Append(ctx, foldtype.EventInput{Type: "x", IdempotencyKey: "k2"}); !errors.Is(err, refused) {
		t.Fatalf("a fresh message of that type: got %v, want the check's error", err)
	}
}

// A record effect runs in the write's transaction: its error refuses the write, and nothing of
// it is stored.
func TestRecordEffectErrorRefusesTheWrite(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	refused := errors.New("refused by the effect")
	var seen []int64
	s.k.OnRecorded(func(t *kernel.Tx, m *kernel.StreamState, batch []kernel.Pending, adm []kernel.Admitted) error {
		if m.Row.Path == "/refused" {
			return refused
		}
		seen = append(seen, m.Tail)
		return nil
	})
	if _, err := s.Events().Stream("/refused").Append(ctx, ev("a")); !errors.Is(err, refused) {
		t.Fatalf("append: got %v, want the effect's error", err)
	}
	if _, err := s.Events().Stream("/kept").Append(ctx, ev("a"), ev("b")); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != 2 {
		t.Fatalf("the effect saw tails %v, want [2] (it runs with the tail past the record)", seen)
	}
	page, err := s.Events().Stream("/refused").Read(ctx, 0, 10)
	if err != nil && !errors.Is(err, foldtype.ErrStreamNotFound) {
		t.Fatal(err)
	}
	if len(page.Events) != 0 {
		t.Fatalf("the refused write stored %d events", len(page.Events))
	}
}

// A hold parks every other write to its stream until it ends; writes to other streams go on.
func TestHoldParksOtherWritesToItsStreamUntilItEnds(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	h := &kernel.Hold{Path: "/held"}
	if err := s.k.WriteHolding(ctx, h, func(t *kernel.Tx) error { t.StartHold(h); return nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Events().Stream("/held").Append(ctx, ev("waits"))
		done <- err
	}()
	waitFor(t, func() bool { return parkedWrites(s) == 1 })
	if _, err := s.Events().Stream("/free").Append(ctx, ev("goes")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the write to the held stream was answered (%v) before the hold ended", err)
	default:
	}
	if err := s.k.WriteHolding(ctx, h, func(t *kernel.Tx) error { t.EndHold(h); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the parked write, once the hold ended: %v", err)
	}
}

// A close effect's stop runs when Close stops intake and its drain before Close returns.
func TestCloseEffectStopsAndDrains(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	var order []string
	s.k.OnClose(func() { order = append(order, "stop") }, func() { order = append(order, "drain") })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "stop" || order[1] != "drain" {
		t.Fatalf("close effects ran %v, want [stop drain]", order)
	}
}
