package host_test

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/storeopen"
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
	s, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{}) // a file path in production
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := s.Close(context.Background()); err != nil {
			fmt.Println("close:", err)
		}
	}()
	h, err := host.New(s, host.Config{})
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := h.Shutdown(ctx); err != nil {
			fmt.Println("shutdown:", err)
		}
	}()

	contract := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{
		Slug: "tally", Version: "1", Description: "counts ticks", Consumes: []string{"tick"},
	})
	if _, err := host.Register(ctx, h, "/clock", &tallyProcessor{Base: foldstream.NewBase(contract)}); err != nil {
		panic(err)
	}

	var last foldtype.Event
	for range 3 {
		got, err := s.Events().Stream("/clock").Append(ctx, foldtype.EventInput{Type: "tick"})
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

// Run one processor on every stream under /clocks/: each stream gets its own engine and state,
// opened by its first append.
func ExampleRegisterPattern() {
	ctx := context.Background()
	s, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{}) // a file path in production
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := s.Close(context.Background()); err != nil {
			fmt.Println("close:", err)
		}
	}()
	h, err := host.New(s, host.Config{})
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := h.Shutdown(ctx); err != nil {
			fmt.Println("shutdown:", err)
		}
	}()

	contract := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{
		Slug: "tally", Version: "1", Description: "counts ticks", Consumes: []string{"tick"},
	})
	if err := host.RegisterPattern(ctx, h, "/clocks/*", &tallyProcessor{Base: foldstream.NewBase(contract)}); err != nil {
		panic(err)
	}
	for _, path := range []string{"/clocks/a", "/clocks/b", "/clocks/a"} {
		if _, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			panic(err)
		}
	}
	for _, path := range []string{"/clocks/a", "/clocks/b"} {
		snap, err := h.Snapshot(ctx, path, "tally")
		if err != nil {
			panic(err)
		}
		fmt.Println(path, string(snap.State))
	}
	// Output:
	// /clocks/a {"count":2}
	// /clocks/b {"count":1}
}
