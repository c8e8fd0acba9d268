package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

func streamAt(t *testing.T, u string) *client.Stream {
	t.Helper()
	s, err := client.NewStream(u, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pullWakeSetup(t *testing.T) (base string, subs *client.Subscriptions) {
	t.Helper()
	base = testserver.Start(t)
	ctx := ctxT(t)
	wake := streamAt(t, base+"/v1/stream/wake")
	if _, err := wake.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	subs, err := client.NewSubscriptions(base+"/v1/stream/", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, created, err := subs.Create(ctx, "pool", client.SubscriptionSpec{Type: "pull-wake", Pattern: "jobs/*", WakeStream: "wake", LeaseTTL: 3 * time.Second})
	if err != nil || !created {
		t.Fatalf("create subscription: %v %v", created, err)
	}
	if _, created, err := subs.Create(ctx, "pool", client.SubscriptionSpec{Type: "pull-wake", Pattern: "jobs/*", WakeStream: "wake", LeaseTTL: 3 * time.Second}); err != nil || created {
		t.Fatalf("re-confirm: %v %v, want an idempotent re-confirmation", created, err)
	}
	return base, subs
}

// TestSubscriptionFencingErrorsAreCoded: a second worker's claim is ErrAlreadyClaimed, and an ack
// of a wake that was released (no longer current) is ErrFenced; a missing subscription is
// ErrSubscriptionNotFound.
func TestSubscriptionFencingErrorsAreCoded(t *testing.T) {
	base, subs := pullWakeSetup(t)
	ctx := ctxT(t)
	job := streamAt(t, base+"/v1/stream/jobs/1")
	if _, err := job.Create(ctx, client.CreateOptions{ContentType: "application/json", Data: []byte(`{"job":1}`)}); err != nil {
		t.Fatal(err)
	}
	w, err := subs.Claim(ctx, "pool", "a")
	if err != nil || w == nil || len(w.Streams) != 1 || w.Streams[0].Path != "jobs/1" {
		t.Fatalf("claim: %+v %v", w, err)
	}
	if _, err := subs.Claim(ctx, "pool", "b"); !errors.Is(err, client.ErrAlreadyClaimed) {
		t.Fatalf("second claim: %v, want ErrAlreadyClaimed", err)
	}
	if err := subs.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, err := subs.Ack(ctx, w, w.AckAll(), true); !errors.Is(err, client.ErrFenced) || client.CodeOf(err) != client.CodeFenced {
		t.Fatalf("ack of a released wake: %v, want ErrFenced", err)
	}
	if _, err := subs.Get(ctx, "missing"); !errors.Is(err, client.ErrSubscriptionNotFound) {
		t.Fatalf("missing subscription: %v", err)
	}
}

// TestPullWakeWorkersProcessEveryJobOnce: two RunWorker loops racing for one subscription
// process each wake once and ack it, so every job stream ends acked at its tail.
func TestPullWakeWorkersProcessEveryJobOnce(t *testing.T) {
	base, subs := pullWakeSetup(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	handled := map[string]int{} // wake id -> times handled
	var wg sync.WaitGroup
	for _, name := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := subs.RunWorker(ctx, client.WorkerConfig{Subscription: "pool", Worker: name,
				Handle: func(ctx context.Context, w *client.Wake) error {
					mu.Lock()
					handled[w.WakeID]++
					mu.Unlock()
					return nil
				}})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("worker %s: %v", name, err)
			}
		}()
	}
	const jobs = 3
	for i := range jobs {
		s := streamAt(t, fmt.Sprintf("%s/v1/stream/jobs/%d", base, i))
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json", Data: []byte(`{"job":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	var info client.SubscriptionInfo
	if !wait.Every(15*time.Second, 20*time.Millisecond, func() bool {
		var err error
		if info, err = subs.Get(ctx, "pool"); err != nil {
			t.Fatal(err)
		}
		acked := 0
		for _, l := range info.Streams {
			if l.AckedOffset == "0000000000000000_0000000000000001" {
				acked++
			}
		}
		return acked == jobs
	}) {
		t.Fatalf("jobs not all acked: %+v", info.Streams)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("wake %s handled %d times, want once", id, n)
		}
	}
	if len(handled) == 0 {
		t.Fatal("no wake was handled")
	}
}

// TestSubscriptionDeleteRemovesItAndIsIdempotent: after Delete the subscription is gone (Get and
// Claim answer ErrSubscriptionNotFound), a second Delete is no error, and the id can be created
// again afresh.
func TestSubscriptionDeleteRemovesItAndIsIdempotent(t *testing.T) {
	_, subs := pullWakeSetup(t)
	ctx := ctxT(t)
	if err := subs.Delete(ctx, "pool"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := subs.Get(ctx, "pool"); !errors.Is(err, client.ErrSubscriptionNotFound) {
		t.Fatalf("get after delete: %v, want ErrSubscriptionNotFound", err)
	}
	if _, err := subs.Claim(ctx, "pool", "a"); !errors.Is(err, client.ErrSubscriptionNotFound) {
		t.Fatalf("claim after delete: %v, want ErrSubscriptionNotFound", err)
	}
	if err := subs.Delete(ctx, "pool"); err != nil {
		t.Fatalf("second delete: %v, want no error", err)
	}
	if _, created, err := subs.Create(ctx, "pool", client.SubscriptionSpec{Type: "pull-wake", Pattern: "other/*", WakeStream: "wake"}); err != nil || !created {
		t.Fatalf("create after delete with another configuration: created=%v %v, want a fresh subscription", created, err)
	}
}
