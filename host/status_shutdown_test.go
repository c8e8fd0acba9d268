package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

// statusProbe runs one blocking effect per "tick": it says it entered, waits to be released, and
// then records the host's status of the stream's processors, as seen from inside the effect.
type statusProbe struct {
	foldstream.Base[struct{}]
	h       *host.Host
	entered chan struct{}
	release chan struct{}
	seen    chan []foldtype.ProcessorStatus
}

func newStatusProbe(t testing.TB) *statusProbe {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[struct{}]{Slug: "probe", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	return &statusProbe{Base: foldstream.NewBase(c), entered: make(chan struct{}, 1), release: make(chan struct{}),
		seen: make(chan []foldtype.ProcessorStatus, 1)}
}

func (p *statusProbe) ProcessEvent(a *foldstream.ProcessEventArgs[struct{}]) error {
	if a.Event == nil {
		return nil
	}
	path := a.Event.Path
	a.BlockProcessorWhile(func(ctx context.Context) error {
		p.entered <- struct{}{}
		<-p.release
		p.seen <- p.h.ProcessorsOn(ctx, path)
		return nil
	})
	return nil
}

// An engine finishing its event in progress while the host shuts down still holds its lease and
// runs that event's effects: the host reports the processor as this node's, with the lease's
// generation, for as long as it holds the lease; once Shutdown returned it reports nothing.
func TestProcessorFinishingItsEventWhileTheHostShutsDownIsReportedHereWithItsLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		h := newHost(t, s)
		p := newStatusProbe(t)
		p.h = h
		if _, err := host.Register(ctx, h, "/sd", p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Events().Stream("/sd").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the effect never ran")
		}
		done := make(chan error, 1)
		go func() { done <- h.Shutdown(ctx) }()
		waitFor(t, func() bool { return h.ProcessorPaths() == nil }) // the shutdown has begun
		close(p.release)
		var sts []foldtype.ProcessorStatus
		select {
		case sts = <-p.seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the effect never finished")
		}
		if len(sts) != 1 || sts[0].Slug != "probe" || !sts[0].Local || sts[0].Owner != h.NodeID() || sts[0].Generation < 1 {
			t.Fatalf("status from the effect in progress while the host shuts down: %+v, want the processor here (%q) under its lease", sts, h.NodeID())
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if sts := h.ProcessorsOn(ctx, "/sd"); len(sts) != 0 {
			t.Fatalf("status after Shutdown returned: %+v, want none", sts)
		}
	})
}
