package testsupport_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/testsupport"
)

func in(typ string) foldtype.EventInput { return foldtype.EventInput{Type: typ} }

func TestMemoryStream_IdempotencyEchoesAndRefusesWholeCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := testsupport.NewMemoryStream()
	first, err := mem.Append(ctx, foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"x":1,"y":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	echo, err := mem.Append(ctx, foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"y":2,"x":1}`)})
	if err != nil || echo[0].Offset != first[0].Offset || mem.Head() != 1 {
		t.Fatalf("echo: got %+v, %v, head %d", echo, err, mem.Head())
	}
	_, err = mem.Append(ctx, in("fresh"), foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"x":2}`)})
	if !errors.Is(err, foldtype.ErrIdempotencyConflict) || err.Error() != `idempotency key "k" already names a different event at offset 1` {
		t.Fatalf("conflict: got %v", err)
	}
	if mem.Head() != 1 || len(mem.Events()) != 1 {
		t.Errorf("the refused call committed something: head %d, log %d", mem.Head(), len(mem.Events()))
	}
	dup, err := mem.Append(ctx, foldtype.EventInput{Type: "b", IdempotencyKey: "d"}, foldtype.EventInput{Type: "b", IdempotencyKey: "d"})
	if err != nil || dup[0].Offset != 2 || dup[1].Offset != 2 || len(mem.Events()) != 2 {
		t.Errorf("duplicate key in one batch: got %+v, %v", dup, err)
	}
}

func TestMemoryStream_OffsetPreconditionAndTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := testsupport.NewMemoryStream()
	if _, err := mem.Append(ctx, foldtype.EventInput{Type: "a", Offset: 1}, foldtype.EventInput{Type: "a", Offset: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := mem.Append(ctx, foldtype.EventInput{Type: "a", Offset: 2})
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeOffsetConflict || !reflect.DeepEqual(fe.Data, map[string]any{"expected": int64(2), "actual": int64(3)}) {
		t.Fatalf("got %#v", err)
	}
	if _, err := mem.Append(ctx, in("  ")); err == nil || err.Error() != "every event needs a non-empty type" {
		t.Errorf("blank type: got %v", err)
	}
	if evs, err := mem.Append(ctx); err != nil || evs != nil || mem.Head() != 2 {
		t.Errorf("empty append: %v %v", evs, err)
	}
}

func TestMemoryStream_ReadProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := testsupport.NewMemoryStream()
	_, _ = mem.Append(ctx, in("a"), in("b"), foldtype.EventInput{Type: "c", Ephemeral: true})
	p, _ := mem.Read(ctx, 0, 500)
	if len(p.Events) != 2 || p.ScannedThroughOffset != 3 || !p.AtHead {
		t.Errorf("short page: %+v", p)
	}
	p, _ = mem.Read(ctx, 0, 1)
	if len(p.Events) != 1 || p.ScannedThroughOffset != 1 || p.AtHead {
		t.Errorf("full page: %+v", p)
	}
	p, _ = mem.Read(ctx, 1, 1)
	if p.ScannedThroughOffset != 2 || !p.AtHead {
		t.Errorf("full page ending at the newest durable: %+v", p)
	}
	if mem.Reads() != 3 {
		t.Errorf("reads %d", mem.Reads())
	}
}

type countRunner struct {
	foldtype.Runner
	pushes atomic.Int64
	block  chan struct{}
}

func (c *countRunner) ProcessEventBatch(ctx context.Context, _ []foldtype.Event, _ foldtype.ScannedRange) error {
	<-c.block
	c.pushes.Add(1)
	return nil
}

func (c *countRunner) Drain(context.Context) error { return nil }

func TestMemoryStream_WaitIdleWaitsForPushes(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	r := &countRunner{block: make(chan struct{})}
	mem.Register(r)
	_, _ = mem.Append(context.Background(), in("a"))
	_, _ = mem.Append(context.Background(), in("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := mem.WaitIdle(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle returned %v while pushes were blocked", err)
	}
	close(r.block)
	if err := mem.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.pushes.Load() != 2 {
		t.Errorf("pushes %d", r.pushes.Load())
	}
}

func TestFakeClock(t *testing.T) {
	t.Parallel()
	c := testsupport.NewFakeClock()
	if !c.Now().Equal(testsupport.T) {
		t.Fatalf("now %v", c.Now())
	}
	fired := make(chan string, 2)
	c.AfterFunc(time.Second, func() { fired <- "a" })
	stop := c.AfterFunc(2*time.Second, func() { fired <- "b" })
	c.Advance(999 * time.Millisecond)
	select {
	case f := <-fired:
		t.Fatalf("%s fired early", f)
	default:
	}
	c.Advance(time.Millisecond)
	if f := <-fired; f != "a" {
		t.Fatalf("fired %s", f)
	}
	if !stop() {
		t.Error("stop reported the timer as already fired")
	}
	c.Advance(time.Hour)
	select {
	case f := <-fired:
		t.Fatalf("stopped timer %s fired", f)
	case <-time.After(10 * time.Millisecond):
	}
	if got := c.Now().Sub(testsupport.T); got != time.Hour+time.Second {
		t.Errorf("advanced %v", got)
	}
}

// WaitArmed returns once code under test arms the deadline, passing over earlier ones, and a
// non-positive delay fires at once like time.AfterFunc.
func TestFakeClockWaitArmedAndImmediateTimers(t *testing.T) {
	t.Parallel()
	c := testsupport.NewFakeClock()
	go func() {
		c.AfterFunc(time.Minute, func() {})
		c.AfterFunc(20*time.Second, func() {})
	}()
	c.WaitArmed(t, testsupport.T.Add(20*time.Second))
	if got := c.Pending(); len(got) != 2 || !got[0].Equal(testsupport.T.Add(20*time.Second)) {
		t.Fatalf("pending %v, want [T+20s T+1m]", got)
	}
	// T+1m was passed over: waiting for it again needs a new arming.
	go c.AfterFunc(time.Minute, func() {})
	c.WaitArmed(t, testsupport.T.Add(time.Minute))
	if got := len(c.Pending()); got != 3 {
		t.Fatalf("pending %d timers, want 3", got)
	}
	fired := make(chan struct{})
	c.AfterFunc(0, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("a zero-delay timer did not fire without Advance")
	}
}

// A retry under a used key must carry the same body, compared number by exact value: a nearby
// integer beyond 2^53 is a different event, refused as a conflict, never silently deduplicated.
func TestIdempotentRetryWithADifferentLargeIntegerConflicts(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStream()
	ctx := context.Background()
	if _, err := mem.Append(ctx, foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"n":9007199254740993}`)}); err != nil {
		t.Fatal(err)
	}
	_, err := mem.Append(ctx, foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"n":9007199254740992}`)})
	if !errors.Is(err, foldtype.ErrIdempotencyConflict) {
		t.Fatalf("got %v, want IDEMPOTENCY_CONFLICT", err)
	}
	echo, err := mem.Append(ctx, foldtype.EventInput{Type: "a", IdempotencyKey: "k", Payload: json.RawMessage(`{"n":9007199254740993.0}`)})
	if err != nil || echo[0].Offset != 1 {
		t.Fatalf("same value written differently: got %v, %v; want the echo of offset 1", echo, err)
	}
}

// The in-memory stream refuses exactly what the durable store refuses, with the same codes, so a
// processor's unit tests catch what production would refuse.
func TestMemoryStreamRefusesWhatTheStoreRefuses(t *testing.T) {
	t.Parallel()
	store, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), storeopen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(context.Background()) })
	big := json.RawMessage(`{"s":"` + strings.Repeat("x", foldtype.MaxEventBytes) + `"}`)
	for _, c := range []struct {
		name string
		in   foldtype.EventInput
		want *foldtype.Error
	}{
		{"empty type", foldtype.EventInput{Type: " "}, foldtype.ErrInvalidEvent},
		{"payload not JSON", foldtype.EventInput{Type: "t", Payload: json.RawMessage(`{"a":`)}, foldtype.ErrInvalidEvent},
		{"metadata not JSON", foldtype.EventInput{Type: "t", Metadata: json.RawMessage(`nope`)}, foldtype.ErrInvalidEvent},
		{"type not UTF-8", foldtype.EventInput{Type: "t\xff"}, foldtype.ErrInvalidEvent},
		{"key not UTF-8", foldtype.EventInput{Type: "t", IdempotencyKey: "k\xff"}, foldtype.ErrInvalidEvent},
		{"too large", foldtype.EventInput{Type: "t", Payload: big}, foldtype.ErrEventTooLarge},
	} {
		mem := testsupport.NewMemoryStream()
		_, memErr := mem.Append(context.Background(), foldtype.EventInput{Type: "ok"}, c.in)
		_, storeErr := store.Events().Stream("/"+strings.ReplaceAll(c.name, " ", "-")).Append(context.Background(), foldtype.EventInput{Type: "ok"}, c.in)
		if !errors.Is(storeErr, c.want) {
			t.Fatalf("%s: the store says %v, want %s", c.name, storeErr, c.want.Code)
		}
		if !errors.Is(memErr, c.want) || memErr.Error() != storeErr.Error() {
			t.Errorf("%s: memory stream says %v, store says %v", c.name, memErr, storeErr)
		}
		if got := mem.Head(); got != 0 {
			t.Errorf("%s: memory stream assigned offsets through %d after a refusal", c.name, got)
		}
	}
}
