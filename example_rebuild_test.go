package foldstream_test

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// ExampleTotalState is the state of both versions of the "total" processor.
type ExampleTotalState struct {
	Total int `json:"total"`
}

// exampleTotal is the "total" processor at a version: version 1 counts each sale once, version 2
// counts it by ten (a fix its author shipped): its state is rebuilt from the log.
type exampleTotal struct {
	foldstream.Base[ExampleTotalState]
	by      int
	effects *[]string
}

func (p exampleTotal) Reduce(a foldstream.ReduceArgs[ExampleTotalState]) (ExampleTotalState, bool, error) {
	return ExampleTotalState{Total: a.State.Total + p.by}, true, nil
}

func (p exampleTotal) ProcessEvent(a *foldstream.ProcessEventArgs[ExampleTotalState]) error {
	if a.Event != nil {
		*p.effects = append(*p.effects, fmt.Sprintf("v%s receipt, total %d", p.Contract().Version(), a.State.Total))
	}
	return nil
}

func newExampleTotal(version string, by int, effects *[]string) exampleTotal {
	c := foldstream.MustDefineContract(foldstream.ContractConfig[ExampleTotalState]{
		Slug: "total", Version: version, Consumes: []string{"sale"},
	})
	return exampleTotal{Base: foldstream.NewBase(c), by: by, effects: effects}
}

// A processor's next version is rebuilt beside the running one: version 1 keeps running its
// effects while version 2 folds the log into its own row; the switch hands the events after
// the running version's cursor to version 2.
func ExampleRebuild() {
	ctx := context.Background()
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	cfg := foldstream.EngineConfig{Stream: mem, Checkpoints: cps}
	var effects []string
	v1, err := foldstream.NewEngine[ExampleTotalState](newExampleTotal("1", 1, &effects), cfg)
	if err != nil {
		panic(err)
	}
	for range 2 {
		if _, err := mem.Append(ctx, foldstream.EventInput{Type: "sale"}); err != nil {
			panic(err)
		}
	}
	if err := v1.CatchUpFromLog(ctx); err != nil {
		panic(err)
	}

	rb, err := foldstream.NewRebuild[ExampleTotalState](newExampleTotal("2", 10, &effects), cfg)
	if err != nil {
		panic(err)
	}
	if err := rb.CatchUp(ctx); err != nil { // Reduce only: no receipts
		panic(err)
	}
	if _, err := rb.Switch(ctx, v1); err != nil { // at v1's cursor: the offset v1 ran effects through
		panic(err)
	}
	_ = v1.Close(ctx)
	v2, err := foldstream.NewEngine[ExampleTotalState](newExampleTotal("2", 10, &effects), cfg)
	if err != nil {
		panic(err)
	}
	if _, err := mem.Append(ctx, foldstream.EventInput{Type: "sale"}); err != nil {
		panic(err)
	}
	snap, err := v2.Snapshot(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("switched:", rb.Switched())
	fmt.Println("total", snap.State.Total)
	for _, e := range effects {
		fmt.Println(e)
	}
	// Output:
	// switched: true
	// total 30
	// v1 receipt, total 1
	// v1 receipt, total 2
	// v2 receipt, total 30
}
