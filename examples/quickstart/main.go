// Command quickstart runs a counter processor against an in-memory stream with its checkpoints in
// a SQLite file, appends a few events, and prints the live-state deltas as they arrive and the
// final state. It exits by itself.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// CounterState is the reduced state.
type CounterState struct {
	Ticks     int `json:"ticks"`
	LastBurst int `json:"lastBurst"`
}

// TickedPayload is the payload of a "demo/ticked" event.
type TickedPayload struct {
	By int `json:"by" jsonschema:"minimum=1"`
}

var contract = foldstream.MustDefineContract(foldstream.ContractConfig[CounterState]{
	Slug:        "counter",
	Version:     "1",
	Description: "counts ticks and announces every tenth",
	Consumes:    []string{"demo/ticked"},
	Emits:       []string{"demo/milestone-reached"},
	Events: []foldstream.EventDefinition{
		foldstream.DefineEvent[TickedPayload]("demo/ticked", "the counter ticked"),
	},
})

// Counter is the processor.
type Counter struct {
	foldstream.Base[CounterState]
}

// Reduce adds the tick's increment.
func (Counter) Reduce(a foldstream.ReduceArgs[CounterState]) (CounterState, bool, error) {
	p := a.Payload.(TickedPayload)
	return CounterState{Ticks: a.State.Ticks + p.By, LastBurst: p.By}, true, nil
}

// ProcessEvent announces every tenth tick once (the idempotency key dedupes retries).
func (c Counter) ProcessEvent(a *foldstream.ProcessEventArgs[CounterState]) error {
	if a.Event == nil || a.State.Ticks/10 == a.PreviousState.Ticks/10 {
		return nil
	}
	tens := a.State.Ticks / 10 * 10
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldstream.EventInput{
			Type:           "demo/milestone-reached",
			Payload:        foldstream.JSON(map[string]int{"ticks": tens}),
			IdempotencyKey: c.IdempotencyKey(fmt.Sprintf("milestone-%d", tens), nil),
		})
		return err
	})
	return nil
}

// ProjectLiveState shows clients the tick count only.
func (Counter) ProjectLiveState(s CounterState) (any, error) {
	return map[string]int{"ticks": s.Ticks}, nil
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "foldstream-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "checkpoints.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	cps, err := foldstream.NewCheckpointTable(ctx, db, foldstream.CheckpointTableConfig{})
	if err != nil {
		return err
	}

	mem := testsupport.NewMemoryStream()
	mem.OnCommit(func(events []foldstream.Event, _ foldstream.ScannedRange) {
		for _, ev := range events {
			switch ev.Type {
			case foldtype.LiveStateChangedType:
				var d foldtype.LiveStateDelta
				if err := json.Unmarshal(ev.Payload, &d); err != nil {
					fmt.Printf("  delta @%d  unreadable: %v\n", ev.Offset, err)
					continue
				}
				patch, err := json.Marshal(d.Patch)
				if err != nil {
					fmt.Printf("  delta @%d  unprintable patch: %v\n", ev.Offset, err)
					continue
				}
				fmt.Printf("  delta @%d  rev +%d  %s\n", ev.Offset, d.To-d.From, patch)
			default:
				fmt.Printf("  event @%d  %s %s\n", ev.Offset, ev.Type, ev.Payload)
			}
		}
	})

	// Contained failures (here: the invalid payload appended on purpose below) go to the reporter;
	// the default one logs a WARN line. This demo prints them as part of its story instead.
	reporter := foldstream.ReporterFunc(func(_ context.Context, site string, err error, _ ...slog.Attr) {
		fmt.Printf("  skipped   (as intended: %s refused the payload: %v)\n", site, err)
	})
	eng, err := foldstream.NewEngine[CounterState](Counter{foldstream.NewBase(contract)},
		foldstream.EngineConfig{Stream: mem, Checkpoints: cps, Reporter: reporter})
	if err != nil {
		return err
	}
	mem.Register(eng)

	for _, by := range []int{3, 4, 5, 1, 9} {
		if _, err := mem.Append(ctx, foldstream.EventInput{Type: "demo/ticked", Payload: foldstream.JSON(TickedPayload{By: by})}); err != nil {
			return err
		}
		if err := mem.WaitIdle(ctx); err != nil {
			return err
		}
	}
	// A payload its schema refuses ("by" must be at least 1) is skipped and reported, never
	// wedging the engine: the state below does not count it.
	if _, err := mem.Append(ctx, foldstream.EventInput{Type: "demo/ticked", Payload: json.RawMessage(`{"by":0}`)}); err != nil {
		return err
	}
	if err := mem.WaitIdle(ctx); err != nil {
		return err
	}

	snap, err := eng.Snapshot(ctx)
	if err != nil {
		return err
	}
	live, err := eng.LiveSnapshot(ctx)
	if err != nil {
		return err
	}
	cp, _, err := cps.ReadCheckpoint(ctx, "counter")
	if err != nil {
		return err
	}
	fmt.Printf("state at offset %d: %+v\n", snap.Offset, snap.State)
	fmt.Printf("live state: %s\n", live.State)
	fmt.Printf("checkpoint: version %s, reduced through %d, state %s\n", cp.ReducerVersion, cp.ReducedThroughOffset, cp.State)
	return nil
}
