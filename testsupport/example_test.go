package testsupport_test

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

type tally struct {
	Count int `json:"count"`
}

type tallyProcessor struct{ foldstream.Base[tally] }

func (tallyProcessor) Reduce(a foldstream.ReduceArgs[tally]) (tally, bool, error) {
	return tally{Count: a.State.Count + 1}, true, nil
}

// A processor tested end to end against the in-memory stream and checkpoints.
func ExampleMemoryStream() {
	ctx := context.Background()
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{Slug: "tally", Version: "1", Consumes: []string{"tick"}})
	mem := testsupport.NewMemoryStream()
	cps := testsupport.MemoryCheckpoints()
	eng, _ := foldstream.NewEngine[tally](tallyProcessor{foldstream.NewBase(contract)}, foldstream.EngineConfig{Stream: mem, Checkpoints: cps})
	mem.Register(eng)

	_, _ = mem.Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "tick"})
	_ = mem.WaitIdle(ctx) // every push landed, every engine drained

	snap, _ := eng.Snapshot(ctx)
	cp, _ := cps.Get("tally")
	fmt.Println("state:", snap.State.Count, "checkpoint writes:", cps.Writes(), "stored:", string(cp.State))
	fmt.Println("reads:", mem.Reads(), "deltas:", len(mem.EventsOfType(foldtype.LiveStateChangedType)))
	// Output:
	// state: 2 checkpoint writes: 1 stored: {"count":2}
	// reads: 0 deltas: 1
}

// Folding inputs through Reduce alone.
func ExampleReduceProcessor() {
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[tally]{Slug: "tally", Version: "1"})
	got := testsupport.ReduceProcessor[tally](tallyProcessor{foldstream.NewBase(contract)},
		[]foldtype.EventInput{{Type: "tick"}, {Type: "tick"}, {Type: "tick"}})
	fmt.Println(got.Count)
	// Output: 3
}
