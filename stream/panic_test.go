package stream

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func setupLogged(t *testing.T) (*Store, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	s, err := openStore(":memory:", Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, logs
}

// TestPanickingSubscriberIsRecovered: a DeliverFunc that panics is recovered and logged; its push
// settles (WaitDelivered does not hang), the subscription keeps running, and the next push chains
// on from the failed range so the receiver can heal from the log.
func TestPanickingSubscriberIsRecovered(t *testing.T) {
	t.Parallel()
	s, logs := setupLogged(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ranges []foldtype.ScannedRange
	sub, err := s.Events().Subscribe("/p", func(_ context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
		mu.Lock()
		ranges = append(ranges, r)
		mu.Unlock()
		if evs[0].Type == "boom" {
			panic("subscriber fault")
		}
		return nil
	}, SubscribeOptions{Name: "panicky"})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/p", ev("boom"))
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatalf("WaitDelivered after a panicking delivery: %v", err)
	}
	mustAppend(t, s, "/p", ev("fine"))
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranges) != 2 || ranges[1].After != ranges[0].Through {
		t.Fatalf("ranges: got %+v, want two that chain", ranges)
	}
	if out := logs.String(); !strings.Contains(out, "delivery panicked") || !strings.Contains(out, "subscriber fault") {
		t.Fatalf("log: got %q, want the recovered panic reported", out)
	}
}

// TestPanickingAfterCommitHookIsRecovered: a panic in an after-commit hook is recovered and
// logged; the write it belongs to is committed and acknowledged, and the writer keeps serving.
func TestPanickingAfterCommitHookIsRecovered(t *testing.T) {
	t.Parallel()
	s, logs := setupLogged(t)
	ctx := context.Background()
	mustAppend(t, s, "/h", ev("a"))
	err := s.k.Write(ctx, func(t *kernel.Tx) error {
		t.AfterCommit(func() { panic("hook fault") })
		return nil
	})
	if err != nil {
		t.Fatalf("write with a panicking hook: %v", err)
	}
	if got := mustAppend(t, s, "/h", ev("b")); got[0].Offset != 2 {
		t.Fatalf("append after the panic at offset %d, want 2", got[0].Offset)
	}
	if out := logs.String(); !strings.Contains(out, "after-commit hook panicked") || !strings.Contains(out, "hook fault") {
		t.Fatalf("log: got %q, want the recovered panic reported", out)
	}
}
