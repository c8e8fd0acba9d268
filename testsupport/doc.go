// Package testsupport holds in-memory stand-ins for testing foldstream processors
// (docs/engine.md#test-support):
//
//   - [MemoryStream]: an in-memory stream with idempotency, offset preconditions, a read proof over
//     its in-memory head, fire-and-forget pushes to registered engines, and counters for reads and
//     claims. [MemoryStream.WaitIdle] replaces fixed sleeps.
//   - [MemoryCheckpoints]: the real [sqlcheckpoint.Table] over in-memory SQLite, counting
//     writes.
//   - [ReduceProcessor]: fold inputs through a processor's Reduce alone.
//   - [FakeClock]: wall-clock time fixed at [T] until advanced.
//   - [PushedByARow]: a model of a real subscription row pushing an engine.
//
// A typical test:
//
//	mem := testsupport.NewMemoryStream()
//	cps := testsupport.MemoryCheckpoints()
//	eng, _ := foldstream.NewEngine(myProcessor, foldstream.EngineConfig{Stream: mem, Checkpoints: cps})
//	mem.Register(eng)
//	mem.Append(ctx, foldstream.EventInput{Type: "tick"})
//	mem.WaitIdle(ctx)
//	snap, _ := eng.Snapshot(ctx)
package testsupport
