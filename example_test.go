package foldstream_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

type ExampleCounterState struct {
	Ticks int `json:"ticks"`
}

type ExampleCounter struct {
	foldstream.Base[ExampleCounterState]
}

func (ExampleCounter) Reduce(a foldstream.ReduceArgs[ExampleCounterState]) (ExampleCounterState, bool, error) {
	if a.Event.Type != "tick" {
		return a.State, false, nil
	}
	return ExampleCounterState{Ticks: a.State.Ticks + 1}, true, nil
}

func (c ExampleCounter) ProcessEvent(a *foldstream.ProcessEventArgs[ExampleCounterState]) error {
	if a.Event == nil || a.State.Ticks%3 != 0 {
		return nil
	}
	ticks := a.State.Ticks
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldstream.EventInput{
			Type:           "milestone",
			Payload:        foldstream.JSON(map[string]int{"at": ticks}),
			IdempotencyKey: c.IdempotencyKey(fmt.Sprint("milestone-", ticks), nil),
		})
		return err
	})
	return nil
}

func ExampleEngine() {
	ctx := context.Background()
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[ExampleCounterState]{
		Slug: "counter", Version: "1", Consumes: []string{"tick"}, Emits: []string{"milestone"},
	})
	mem := testsupport.NewMemoryStream()
	eng, err := foldstream.NewEngine[ExampleCounterState](ExampleCounter{foldstream.NewBase(contract)},
		foldstream.EngineConfig{Stream: mem, Checkpoints: testsupport.MemoryCheckpoints()})
	if err != nil {
		panic(err)
	}
	mem.Register(eng)
	for range 3 {
		if _, err := mem.Append(ctx, foldstream.EventInput{Type: "tick"}); err != nil {
			panic(err)
		}
	}
	_ = mem.WaitIdle(ctx)
	snap, _ := eng.Snapshot(ctx)
	fmt.Println("ticks:", snap.State.Ticks)
	for _, ev := range mem.EventsOfType("milestone") {
		// The tick's offset depends on how many live-state deltas (ephemerals, which take offsets
		// too) landed between the appends, so print its type.
		fmt.Printf("milestone %s emitted by %s while processing a %s\n", ev.Payload, ev.Source.Processor.Slug, ev.Source.Processor.WhileProcessing.Type)
	}
	// Output:
	// ticks: 3
	// milestone {"at":3} emitted by counter while processing a tick
}

type ExampleDeposit struct {
	Account string  `json:"account"`
	Amount  float64 `json:"amount" jsonschema:"exclusiveMinimum=0"`
}

func ExampleDefineEvent() {
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[map[string]float64]{
		Slug: "balances", Version: "1", Consumes: []string{"deposited"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[ExampleDeposit]("deposited", "money arrived")},
	})
	for _, payload := range []string{`{"account":"a","amount":5,"note":"dropped"}`, `{"account":"a","amount":-1}`} {
		ev, typed, err := contract.Normalize(foldstream.Event{Type: "deposited", Payload: json.RawMessage(payload)})
		if err != nil {
			fmt.Println("invalid payload, skipped")
			continue
		}
		fmt.Printf("%s %+v\n", ev.Payload, typed.(ExampleDeposit))
	}
	// Output:
	// {"account":"a","amount":5} {Account:a Amount:5}
	// invalid payload, skipped
}

// A call to a service outside the store takes the effect key: the same on every retry of the
// event, different on every other stream (docs/engine.md#effect-keys). An event the processor
// appends to its own stream takes IdempotencyKey.
func ExampleContract_EffectKey() {
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[struct{}]{
		Slug: "checkout", Version: "1", Consumes: []string{"checked-out"},
	})
	for _, path := range []string{"/carts/c1", "/carts/c2"} {
		ev := foldstream.Event{Type: "checked-out", Offset: 1, Path: path, CreatedAt: "2026-12-04T20:13:18.123Z"}
		fmt.Println(contract.EffectKey("charge", &ev), "|", contract.IdempotencyKey("charge", &ev))
	}
	// Output:
	// /carts/c1#checkout/charge@1@2026-12-04T20:13:18.123Z | checkout/charge@1
	// /carts/c2#checkout/charge@1@2026-12-04T20:13:18.123Z | checkout/charge@1
}

func ExampleConsumesEvent() {
	durable := foldstream.Event{Type: "chunk"}
	ephemeral := foldstream.Event{Type: "chunk", Ephemeral: true}
	fmt.Println(foldtype.ConsumesEvent(nil, durable), foldtype.ConsumesEvent(nil, ephemeral))
	fmt.Println(foldtype.ConsumesEvent([]string{"*"}, ephemeral), foldtype.ConsumesEvent([]string{"chunk"}, ephemeral))
	fmt.Println(foldtype.ConsumesEvent([]string{}, durable))
	// Output:
	// true false
	// false true
	// false
}

func ExampleApplyPatch() {
	// A client seeded from a live snapshot at the delta's From revision applies its patch.
	seed := json.RawMessage(`{"count":1,"names":["a"]}`)
	patch := json.RawMessage(`[{"op":"replace","path":"/count","value":2},{"op":"add","path":"/names/-","value":"b"}]`)
	out, err := foldstream.ApplyPatch(seed, patch)
	if err != nil {
		fmt.Println("re-seed:", err)
		return
	}
	fmt.Println(string(out))
	// Output:
	// {"count":2,"names":["a","b"]}
}

func ExampleLiveState() {
	mem := testsupport.NewMemoryStream()
	live := foldstream.NewLiveState(mem, "greeting", map[string]string{"text": "hi"}, foldstream.LiveStateConfig{Clock: testsupport.NewFakeClock()})
	seed := live.Snapshot()
	live.Set(map[string]string{"text": "hello"})
	_ = live.Wait(context.Background())
	var d foldtype.LiveStateDelta
	_ = json.Unmarshal(mem.PushedEvents()[0].Payload, &d)
	patch, _ := json.Marshal(d.Patch)
	fmt.Println(d.Key, d.From == seed.Rev, d.To == seed.Rev+1, string(patch))
	// Output:
	// greeting true true [{"op":"replace","path":"/text","value":"hello"}]
}

func ExampleLiveState_SetChanged() {
	type Player struct {
		Name  string `json:"name"`
		Score int    `json:"score"`
	}
	type Game struct {
		Players map[string]Player `json:"players"`
		Round   int               `json:"round"`
	}
	mem := testsupport.NewMemoryStream()
	g := Game{Players: map[string]Player{"ann": {Name: "Ann"}, "bob": {Name: "Bob"}}}
	live := foldstream.NewLiveState(mem, "game", g, foldstream.LiveStateConfig{Clock: testsupport.NewFakeClock()})
	// Ann scores and a round starts: only these two members are encoded, however many players
	// there are.
	g.Players["ann"] = Player{Name: "Ann", Score: 3}
	g.Round++
	live.SetChanged(g, "/players/ann/score", "/round")
	_ = live.Wait(context.Background())
	var d foldtype.LiveStateDelta
	_ = json.Unmarshal(mem.PushedEvents()[0].Payload, &d)
	patch, _ := json.Marshal(d.Patch)
	held, _ := live.SnapshotJSON()
	fmt.Println(string(patch))
	fmt.Println(string(held.State))
	// Output:
	// [{"op":"replace","path":"/round","value":1},{"op":"replace","path":"/players/ann/score","value":3}]
	// {"players":{"ann":{"name":"Ann","score":3},"bob":{"name":"Bob","score":0}},"round":1}
}
