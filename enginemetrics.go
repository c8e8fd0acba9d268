package foldstream

import (
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// EngineMetrics receives the counts of an engine's work as it happens (EngineConfig.Metrics), so
// a host can keep running totals per processor that outlive the engine instance: package host
// counts per registered slug and package server exposes them (docs/server.md#metrics).
//
// The engine calls these methods on its serial chain, or on a blocker's or background attempt's
// goroutine for EventsEmitted: they must return at once, never block and never call the engine.
type EngineMetrics interface {
	// EventProcessed is called after ProcessEvent returned nil for an event and the blockers it
	// registered settled; d is how long the call and its blockers took, on the engine's clock.
	// The eventless pass is not counted. An event processed again (a range whose checkpoint
	// could not be written is retried) is counted again: these are calls, not distinct events.
	EventProcessed(d time.Duration)
	// EventSkipped is called for each event the engine skipped (docs/engine.md#errors-and-reporting),
	// with the reason: SiteReducePayload (the payload breaks its schema) or SiteReduce (Reduce
	// failed or panicked).
	EventSkipped(reason string)
	// EventsEmitted is called when ProcessEvent or one of its blockers appended n events
	// (an idempotent repeat of an earlier emit included; the loop-limit fact excluded).
	EventsEmitted(n int)
	// ProcessEventFailed is called when ProcessEvent (or a blocker it registered) failed for an
	// event or the eventless pass, with the failure's code ([ProcessEventError.Code]:
	// PROCESS_EVENT_FAILED for an error without one and for a panic). Cancellations at close are
	// not failures.
	ProcessEventFailed(code foldtype.Code)
}
