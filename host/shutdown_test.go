package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

// gateRunner is a minimal Runner whose Consumes blocks until released, so a test can hold Add
// between its wake and its subscription. It counts the pushes it receives.
type gateRunner struct {
	entered chan struct{}
	release chan struct{}
	pushes  atomic.Int64
}

func (r *gateRunner) Slug() string { return "gate" }
func (r *gateRunner) Consumes() []string {
	close(r.entered)
	<-r.release
	return nil
}
func (r *gateRunner) ProcessEventBatch(context.Context, []foldtype.Event, foldtype.ScannedRange) error {
	r.pushes.Add(1)
	return nil
}
func (r *gateRunner) CatchUpFromLog(context.Context) error { return nil }
func (r *gateRunner) Revive(context.Context) error         { return nil }
func (r *gateRunner) WaitUntilProcessed(context.Context, int64, time.Duration) error {
	return nil
}
func (r *gateRunner) SnapshotJSON(context.Context) (foldtype.Snapshot[json.RawMessage], error) {
	return foldtype.Snapshot[json.RawMessage]{}, nil
}
func (r *gateRunner) LiveSnapshot(context.Context) (foldtype.LiveSnapshot[json.RawMessage], error) {
	return foldtype.LiveSnapshot[json.RawMessage]{}, nil
}
func (r *gateRunner) PublishLiveState()           {}
func (r *gateRunner) Close(context.Context) error { return nil }
func (r *gateRunner) ReducedThroughOffset() int64 { return 0 }
func (r *gateRunner) Drain(context.Context) error { return nil }

// addHeldAtStart opens a store and a host with manual alarms and starts adding a gateRunner at
// "/s" in the background, returning once that Add is inside the runner's start and held there
// until r.release is closed; the Add's error arrives on added.
func addHeldAtStart(t *testing.T) (s *stream.Store, h *host.Host, r *gateRunner, added chan error) {
	t.Helper()
	s = openStore(t, ":memory:", nil)
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		s.Close(context.Background())
		t.Fatal(err)
	}
	r = &gateRunner{entered: make(chan struct{}), release: make(chan struct{})}
	added = make(chan error, 1)
	go func() { added <- h.Add(context.Background(), "/s", r) }()
	<-r.entered
	return s, h, r, added
}

// An Add that was still starting when Shutdown ran must not leave a live subscription behind.
// The bug: Shutdown only drained processors whose subscription was already set, and Add set it
// afterwards without checking for shutdown (and without the host's lock, a data race with
// lookup/Shutdown), so the processor kept receiving pushes after Shutdown returned, and its
// subscription goroutine ran until the store closed.
func TestShutdownDuringAddLeavesNoSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, h, r, added := addHeldAtStart(t)
	defer s.Close(context.Background())
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	close(r.release)
	if err := <-added; !errors.Is(err, host.ErrShutdown) {
		t.Errorf("Add racing Shutdown: got %v, want ErrShutdown", err)
	}
	if _, err := s.Events().Stream("/s").Append(ctx, foldtype.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	// Closing the store waits for every subscription's delivery goroutine: a push still
	// subscribed would have been delivered by then.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := r.pushes.Load(); n != 0 {
		t.Errorf("got %d pushes after Shutdown, want 0", n)
	}
}

// Remove of a processor whose Add is still starting must not panic. The bug: Add reserves the key
// before it subscribes, and Remove called Drain on the reservation's nil subscription.
func TestRemoveDuringAddDoesNotPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, h, r, added := addHeldAtStart(t)
	defer s.Close(context.Background())
	if err := h.Remove(ctx, "/s", "gate"); !errors.Is(err, host.ErrNotRegistered) {
		t.Errorf("Remove while starting: got %v, want ErrNotRegistered", err)
	}
	close(r.release)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(ctx, "/s", "gate"); err != nil {
		t.Fatalf("Remove after Add: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownProcessorAndShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	if _, err := h.Snapshot(ctx, "/x", "nope"); !errors.Is(err, foldtype.ErrStreamNotFound) {
		t.Fatalf("unknown processor on a missing stream: got %v, want STREAM_NOT_FOUND", err)
	}
	if _, err := host.Register(ctx, h, "/x", newTicker(t, "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Snapshot(ctx, "/x", "nope"); !errors.Is(err, host.ErrNotRegistered) || !errors.Is(err, foldtype.ErrNotRegistered) {
		t.Fatalf("unknown: got %v, want ErrNotRegistered", err)
	}
	if _, err := host.Register(ctx, h, "/x", newTicker(t, "t")); err == nil {
		t.Fatal("second registration of the same slug: got nil error")
	}
	if err := h.WaitUntilProcessed(ctx, "/x", "t", 2, time.Second); err != nil {
		t.Fatalf("wait for the birth batch: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Register(ctx, h, "/y", newTicker(t, "t")); !errors.Is(err, host.ErrShutdown) {
		t.Fatalf("register after shutdown: got %v, want ErrShutdown", err)
	}
}

// Shutdown delivers what the push chains still owe and waits for the engines: afterwards every
// processor's checkpoint covers every consumed event appended before it.
func TestShutdownDrainsPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, ":memory:", nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	if _, err := host.Register(ctx, h, "/d", newSeer(t, "seen", "tick")); err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 50 {
		got, err := s.Events().Stream("/d").Append(ctx, foldtype.EventInput{Type: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		last = got[0].Offset
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cps, err := s.Events().Checkpoints(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	cp, ok, err := cps.ReadCheckpoint(ctx, "seen")
	if err != nil || !ok {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	var st seenState
	if err := json.Unmarshal(cp.State, &st); err != nil {
		t.Fatal(err)
	}
	if cp.ReducedThroughOffset != last || len(st.Seen) != 50 {
		t.Fatalf("after shutdown: checkpoint at %d with %d events, want %d with 50", cp.ReducedThroughOffset, len(st.Seen), last)
	}
	if _, err := h.Snapshot(ctx, "/d", "seen"); !errors.Is(err, host.ErrShutdown) {
		t.Fatalf("snapshot after shutdown: got %v, want ErrShutdown", err)
	}
}
