package foldtype

import "time"

// ProcessorStatus is what a host reports about one processor running on one stream: enough for a
// console or an operator to see where it is, without reading its state. The JSON form is the one
// the server's stream information route answers (docs/server.md#stream-listing).
type ProcessorStatus struct {
	// Slug is the processor's contract slug.
	Slug string `json:"slug"`
	// Version is the contract's reducer version.
	Version string `json:"version"`
	// Offset is the offset the processor reduced through (its checkpoint cursor once written).
	Offset int64 `json:"offset"`
	// Rev is the live state's revision (docs/engine.md): deltas on the live route continue from
	// it. Zero when the host does not hold the engine open.
	Rev int64 `json:"rev"`
	// Pattern is the path or path pattern the processor was registered on (host.RegisterPattern);
	// empty when the reporter does not know it.
	Pattern string `json:"pattern,omitempty"`
	// Open reports whether the host holds the processor's engine open now (a pattern's engines
	// open on demand and close when idle).
	Open bool `json:"open"`
	// Parked, when set, is the error the processor stopped on and cannot retry past (code
	// PROCESSOR_PARKED on its routes); nil while it runs.
	Parked *ProcessorError `json:"parked,omitempty"`
	// Owner is the node that runs the processor (its lease holder; docs/postgres.md#processors-and-leases),
	// empty when no node holds its lease now; Generation is that lease's generation.
	Owner      string `json:"owner,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Local reports whether the reporting node is the owner.
	Local bool `json:"local,omitempty"`
	// WorkFailed, when set, is the PERMANENT_FAILURE its last revive failed with: its background
	// work died with its host MaxDeaths times, and it is not revived again until it receives an
	// event (docs/engine.md#work-that-keeps-dying).
	WorkFailed *ProcessorError `json:"workFailed,omitempty"`
	// State is one of the State constants: running, catching_up, failing (Failing says why) or
	// parked (Parked says why) on the node that runs it (Owner); idle or unowned when no node
	// runs it now. Every node of a cluster reports the same state (docs/postgres.md#processors-and-leases).
	State string `json:"state,omitempty"`
	// Failing, when set, is why the processor's ProcessEvent keeps failing on one event and when
	// the host tries again (code PROCESSOR_FAILING on its routes); nil while it runs.
	Failing *ProcessorFailure `json:"failing,omitempty"`
	// Paused, when set, says who paused the processor, when and why (State is then paused; code
	// PROCESSOR_PAUSED on its waits). A pause by the failure policy keeps the failure in Failing.
	Paused *ProcessorPause `json:"paused,omitempty"`
	// WaitingForStore, when set, is a write of the engine's own (an emit or a checkpoint) that the
	// store refused because its database could not be reached and that the engine is sending
	// again (docs/engine.md#writes-through-a-database-blip). The processor is not failing: its
	// State stays what it was, its lag grows meanwhile. Nil when no write waits, and on a node
	// that does not run the processor.
	WaitingForStore *ProcessorStoreWait `json:"waitingForStore,omitempty"`
	// Skipped counts the events the processor skipped, by reason (a payload that breaks its
	// schema, a Reduce that failed or panicked); empty when none.
	Skipped []SkippedEvents `json:"skipped,omitempty"`
	// Rebuilding, when set, is the next version being rebuilt beside this one, with its lag
	// (docs/operations.md#rebuild-beside-the-running-version); nil when none is.
	Rebuilding *ProcessorRebuild `json:"rebuilding,omitempty"`
	// NextVersion, when set, is the next version the program registered for the processor that
	// it has not switched to yet: the rebuild verb rebuilds it beside this one and switches
	// (docs/operations.md#rebuild-beside-the-running-version); empty when none is registered or
	// the switch is done.
	NextVersion string `json:"nextVersion,omitempty"`
}

// Processor states in [ProcessorStatus].State.
const (
	// StateRunning: the owner's engine is open and follows the stream.
	StateRunning = "running"
	// StateCatchingUp: the owner's engine is opening or reading the log from its checkpoint
	// (just started, or just taken over from another node).
	StateCatchingUp = "catching_up"
	// StateFailing: the owner's engine retries an event its ProcessEvent keeps failing on.
	StateFailing = "failing"
	// StateParked: the owner stopped the processor on an error it cannot retry past.
	StateParked = "parked"
	// StateIdle: no node runs the processor because it has nothing to do; the next event
	// its stream receives starts it on the node preferred for it.
	StateIdle = "idle"
	// StateUnowned: no node holds the processor's lease while it has work (its owner died or
	// handed it over); the preferred node takes it over within a lease scan (after a death,
	// once the lease ran out).
	StateUnowned = "unowned"
)

// ProcessorError is an error reported in a ProcessorStatus: a catalogue code and a message.
type ProcessorError struct {
	// Code is the error's catalogue code, e.g. IDEMPOTENCY_CONFLICT.
	Code Code `json:"code"`
	// Message is the human-readable text.
	Message string `json:"message"`
}

// ProcessorStoreWait is a write of a processor's engine that the store could not take because
// its database was out of reach, being sent again (docs/engine.md#writes-through-a-database-blip),
// or the engine's read of the log that its host tries again (docs/store.md#an-engine-behind-the-log).
type ProcessorStoreWait struct {
	// Write is what is being sent again: "emit" or "checkpoint", or "log read" for a catch-up
	// the host tries again.
	Write string `json:"write"`
	// Code and Message are the last attempt's error (UNAVAILABLE or COMMIT_OUTCOME_UNKNOWN).
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Attempts counts the attempts so far, the first included.
	Attempts int `json:"attempts"`
	// Since is when the first attempt failed.
	Since time.Time `json:"since"`
	// GivesUpAt is when the engine stops sending a write again (EngineConfig.WriteRetry after
	// Since) and fails the unit of work, whose effects then run again once the store answers.
	// Zero for a log read, which the host tries again until it goes through.
	GivesUpAt time.Time `json:"givesUpAt,omitzero"`
	// NextRetry is when the host reads the log again; zero for a write (sent again at once, with
	// the engine's backoff).
	NextRetry time.Time `json:"nextRetry,omitzero"`
}
