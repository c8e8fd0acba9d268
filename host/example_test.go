package host_test

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

type tally struct {
	Count int `json:"count"`
}

// tallyProcessor counts "tick" events.
type tallyProcessor struct{ foldstream.Base[tally] }

func (p *tallyProcessor) Reduce(a foldstream.ReduceArgs[tally]) (tally, bool, error) {
	return tally{Count: a.State.Count + 1}, true, nil
}

// Run a processor on a stream with the default host, and read its state after an append.
func Example() {
	ctx := context.Background()
	s, err := stream.Open(":memory:", stream.Options{}) // a file path in production
	if err != nil {
		panic(err)
	}
	defer s.Close()
	h, err := host.New(s, host.Config{})
	if err != nil {
		panic(err)
	}
	defer h.Shutdown(ctx)

	contract := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{
		Slug: "tally", Version: "1", Description: "counts ticks", Consumes: []string{"tick"},
	})
	if _, err := host.Register(ctx, h, "/clock", &tallyProcessor{Base: foldstream.NewBase(contract)}); err != nil {
		panic(err)
	}

	var last foldstream.Event
	for range 3 {
		got, err := s.Append(ctx, "/clock", foldstream.EventInput{Type: "tick"})
		if err != nil {
			panic(err)
		}
		last = got[0]
	}
	// Read-your-writes: the snapshot waits for the pushes the appends queued.
	snap, err := h.Snapshot(ctx, "/clock", "tally")
	if err != nil {
		panic(err)
	}
	// (Offsets also go to the processor's live-state deltas, so the exact numbers vary.)
	fmt.Println(string(snap.State), snap.Offset >= last.Offset)
	// Output: {"count":3} true
}
