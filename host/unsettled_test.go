package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// stuckTicker's ProcessEvent blocks its stream on its first event until its context ends: work
// that never settles before the engine closes.
type stuckTicker struct {
	*ticker
	entered chan struct{}
}

func (p *stuckTicker) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event != nil && a.Event.Type == "tick" {
		a.BlockProcessorWhile(func(ctx context.Context) error {
			select {
			case p.entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}
	return nil
}

// TestAnEngineClosedBeforeItsWorkSettledLeavesItsLeaseToRunOut: on a shared database a host that
// closes an engine whose work has not settled (within the lease time, or the shutdown's grace) (its unit cut short, perhaps
// after its effects, its checkpoint perhaps still on its way) does not hand the lease over at
// once — the next owner would read the old checkpoint and run those effects again — but lets it
// run out. A hand-over of settled work still releases it at once.
func TestAnEngineClosedBeforeItsWorkSettledLeavesItsLeaseToRunOut(t *testing.T) {
	ctx := context.Background()
	d := pgDriver(t)
	c := &releaseCounter{Driver: d}
	s := storeOver(t, d, c, nil)
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	// Settled work: removing the processor releases its lease at once.
	if _, err := host.Register[countState](ctx, h, "/calm", newTicker(t, "tick")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/calm").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/calm", "tick", 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(ctx, "/calm", "tick"); err != nil {
		t.Fatal(err)
	}
	if n := c.single.Load() + c.inGroups.Load(); n != 1 {
		t.Fatalf("positive control: removing a processor whose work settled released %d leases, want 1", n)
	}

	// Work that does not settle within the lease time: the lease is left to run out.
	p := &stuckTicker{ticker: newTicker(t, "stuck"), entered: make(chan struct{}, 1)}
	if _, err := host.Register[countState](ctx, h, "/stuck", p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/stuck").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck processor never started its work")
	}
	// The node shuts down with a grace shorter than the stuck work: the engine closes unsettled.
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := h.Shutdown(sctx); err == nil {
		t.Log("shutdown reported no error")
	}
	if n := c.single.Load(); n != 1 {
		t.Fatalf("%d leases released one at a time, want only the calm processor's", n)
	}
	if n := c.inGroups.Load(); n != 1 {
		t.Fatalf("the shutdown released %d leases, want only the node's: the lease of an engine closed before its work settled must run out", n)
	}
}
