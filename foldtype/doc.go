// Package foldtype is foldstream's shared vocabulary: the names every other package of the module
// speaks in, with nothing behind them. It holds
//
//   - events and their inputs ([Event], [EventInput], [Source], [ReadPage], [ScannedRange]) and the
//     [Stream] an engine runs against;
//   - the platform's event types ([CreatedType], [WokenType], [LiveStateChangedType], the pause
//     and resume control types) and the rules every stream applies to them ([PrepareEventInput],
//     [SameIdempotentEvent], [ConsumesEvent], [ParseControl], [StampOrigin]);
//   - the one catalogue of error codes ([Code], the Code… constants and their Err… sentinels) and
//     the coded [Error] they travel in (docs/engine.md#errors-and-reporting);
//   - checkpoints ([Checkpoint], [CheckpointStorage]), the [Clock], and the status and snapshot
//     shapes a host reports and a server writes ([ProcessorStatus], [Snapshot], [LiveSnapshot]).
//
// It is a leaf: it imports only the standard library and the module's internal JSON scanner, so the
// store, its drivers and the HTTP server link it without the engine (package foldstream) and its
// JSON-Schema libraries. The name follows the module's own ("fold", as in foldstream) rather than
// "fs", which reads as a file system.
package foldtype
