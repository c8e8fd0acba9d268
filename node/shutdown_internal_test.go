package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSteps records the order the shutdown phases ran in and the deadline each was given. A
// phase named in stuck blocks until its context ends, as one waiting on a database that stopped
// answering does.
type fakeSteps struct {
	mu        sync.Mutex
	order     []string
	deadlines map[string]time.Duration // after the shutdown began
	start     time.Time
	stuck     map[string]bool
}

func (f *fakeSteps) phase(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		f.mu.Lock()
		f.order = append(f.order, name)
		if d, ok := ctx.Deadline(); ok {
			f.deadlines[name] = d.Sub(f.start)
		}
		stuck := f.stuck[name]
		f.mu.Unlock()
		if stuck {
			<-ctx.Done()
			return fmt.Errorf("%s: %w", name, ctx.Err())
		}
		return nil
	}
}

func (f *fakeSteps) steps(withHost bool) shutdownSteps {
	s := shutdownSteps{
		stopHTTP:       f.phase("http"),
		stopStore:      f.phase("store"),
		stopBackground: func() { _ = f.phase("background")(context.Background()) },
	}
	if withHost {
		s.handOver = f.phase("host")
	}
	return s
}

func newFakeSteps(stuck ...string) *fakeSteps {
	f := &fakeSteps{deadlines: map[string]time.Duration{}, start: time.Now(), stuck: map[string]bool{}}
	for _, s := range stuck {
		f.stuck[s] = true
	}
	return f
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A node stops taking requests first (a request in progress may still read a processor), then
// its host hands the processors over (checkpoints written through the still-open store, leases
// released), and closes the store last; each phase's deadline leaves the later ones their share.
func TestShutdownStopsRequestsThenHandsOverThenClosesTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 8 * time.Second
		f := newFakeSteps()
		if err := f.steps(true).run(context.Background(), grace, quiet); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if want := []string{"http", "background", "host", "store"}; !slices.Equal(f.order, want) {
			t.Fatalf("phases ran %v; want %v", f.order, want)
		}
		want := map[string]time.Duration{"http": grace / 2, "host": grace * 3 / 4, "store": grace}
		for name, d := range want {
			if f.deadlines[name] != d {
				t.Errorf("%s's deadline %v after the start; want %v", name, f.deadlines[name], d)
			}
		}
	})
}

// Without a host, requests in progress get three quarters of the grace and the store the rest
// (what `foldstream serve` always did).
func TestShutdownWithoutAHostGivesRequestsThreeQuartersOfTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 8 * time.Second
		f := newFakeSteps()
		if err := f.steps(false).run(context.Background(), grace, quiet); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if want := []string{"http", "background", "store"}; !slices.Equal(f.order, want) {
			t.Fatalf("phases ran %v; want %v", f.order, want)
		}
		if f.deadlines["http"] != grace*3/4 || f.deadlines["store"] != grace {
			t.Fatalf("deadlines %v; want http at %v, store at %v", f.deadlines, grace*3/4, grace)
		}
	})
}

// A hand-over and a drain that the database does not let finish are left at their deadlines, not
// failed: the shutdown ends within the grace and returns nil (nothing acknowledged is lost, leases
// expire). A stuck request phase is cut at its share and the others still run.
func TestAShutdownStuckOnTheDatabaseEndsWithinTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 8 * time.Second
		f := newFakeSteps("http", "host", "store")
		start := time.Now()
		err := f.steps(true).run(context.Background(), grace, quiet)
		if took := time.Since(start); took != grace {
			t.Fatalf("shutdown took %v; want the grace, %v", took, grace)
		}
		if want := []string{"http", "background", "host", "store"}; !slices.Equal(f.order, want) {
			t.Fatalf("phases ran %v; want %v", f.order, want)
		}
		// The request phase's own error (its connections cut) is the caller's to see; the
		// hand-over's and the drain's are not errors of the process.
		if err == nil || err.Error() != "http: context deadline exceeded" {
			t.Fatalf("shutdown: %v; want only the request phase's error", err)
		}
	})
}

// Shutdown's ctx ending early cuts every phase short: a program that must exit now does.
func TestShutdownEndsWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSteps("http", "host", "store")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_ = f.steps(true).run(ctx, time.Hour, quiet)
		if took := time.Since(start); took != time.Second {
			t.Fatalf("shutdown took %v; want the context's second", took)
		}
	})
}
