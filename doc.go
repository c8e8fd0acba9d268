// Package foldstream is an embeddable stream-processor engine. Its rules are stated in
// docs/engine.md in the repository; comments cite them as docs/engine.md#<section>.
//
// A processor folds the events of one stream into a state (Reduce), reacts to them with side
// effects (ProcessEvent), and projects a live view that clients follow through RFC 6902 deltas
// (ProjectLiveState). The [Engine] drives one processor against one [Stream] and one
// [CheckpointStorage]:
//
//   - one serial chain per engine: pushes ([Engine.ProcessEventBatch]), catch-ups
//     ([Engine.CatchUpFromLog]) and revive passes never interleave;
//   - one event at a time: an event's BlockProcessorWhile work settles before the next event's
//     ProcessEvent starts;
//   - RunInBackground work is not awaited, may overtake later events, and holds a claim on the
//     host's alarm (20 s, doubling to 30 min on busy revives) while any attempt is in flight;
//   - at most one durable commit per range, after all blocking work settled; a failed batch
//     persists nothing and is retried whole, so effects must be idempotent (emit with
//     Base.IdempotencyKey; call a service outside the store with Base.EffectKey, which is
//     unique across streams);
//   - the at-head pass: when a batch reaches the head, its last consumed event is delivered with
//     Delivery.CaughtUp, or one eventless call is made.
//
// Contracts are defined with [DefineContract]; event payloads are Go types ([DefineEvent]) whose
// JSON Schema is reflected and enforced, or hand-written schemas ([DefineEventSchema]). A
// malformed payload of a known type is skipped for both reduce and effects.
//
// Checkpoints live wherever a [CheckpointStorage] keeps them: the store's own database under a
// host, or a table of a database of your own ([CheckpointTable], "reduce_checkpoints"); a contract
// version bump re-reduces the log up to the old cursor without re-running effects. Live state is
// a [LiveState] that appends ephemeral [foldtype.LiveStateChangedType] deltas to the stream.
//
// Package testsupport provides an in-memory stream, in-memory SQLite checkpoints, a fake clock
// and helpers for testing processors.
//
// # Example
//
// A counter that counts ticks and emits a milestone every third tick:
//
//	type CounterState struct {
//		Ticks int `json:"ticks"`
//	}
//
//	var contract = foldstream.MustDefineContract(foldstream.ContractConfig[CounterState]{
//		Slug:     "counter",
//		Version:  "1",
//		Consumes: []string{"tick"},
//		Emits:    []string{"milestone"},
//	})
//
//	type Counter struct{ foldstream.Base[CounterState] }
//
//	func (Counter) Reduce(a foldstream.ReduceArgs[CounterState]) (CounterState, bool, error) {
//		return CounterState{Ticks: a.State.Ticks + 1}, true, nil
//	}
//
//	func (c Counter) ProcessEvent(a *foldstream.ProcessEventArgs[CounterState]) error {
//		if a.Event == nil || a.State.Ticks%3 != 0 {
//			return nil
//		}
//		ticks := a.State.Ticks
//		a.BlockProcessorWhile(func(ctx context.Context) error {
//			_, err := a.Append(ctx, foldstream.EventInput{
//				Type:           "milestone",
//				Payload:        foldstream.JSON(map[string]int{"at": ticks}),
//				IdempotencyKey: c.IdempotencyKey(fmt.Sprint("milestone-", ticks), nil),
//			})
//			return err
//		})
//		return nil
//	}
//
//	func run(ctx context.Context) error {
//		mem := testsupport.NewMemoryStream() // or a durable stream from package stream
//		db, err := sql.Open("sqlite", "counter.db")
//		if err != nil {
//			return err
//		}
//		cps, err := foldstream.NewCheckpointTable(ctx, db, foldstream.CheckpointTableConfig{})
//		if err != nil {
//			return err
//		}
//		eng, err := foldstream.NewEngine[CounterState](Counter{foldstream.NewBase(contract)},
//			foldstream.EngineConfig{Stream: mem, Checkpoints: cps})
//		if err != nil {
//			return err
//		}
//		mem.Register(eng) // pushes every commit to the engine
//		for range 3 {
//			if _, err := mem.Append(ctx, foldstream.EventInput{Type: "tick"}); err != nil {
//				return err
//			}
//		}
//		if err := eng.WaitUntilProcessed(ctx, 3, 0); err != nil {
//			return err
//		}
//		snap, err := eng.Snapshot(ctx)
//		fmt.Println(snap.State.Ticks) // 3
//		return err
//	}
//
// # Errors
//
// Errors a caller can act on are [*Error] values with a stable [Code]; test them with errors.Is
// against the sentinels (foldtype.ErrReduceCheckpointTooLarge, foldtype.ErrProcessTimeout, ...) or errors.As.
// Contained failures (a failing reduce, projection, background attempt or claim) are handed to the
// [Reporter] (default: log/slog at Warn) and never fail their caller.
package foldstream
