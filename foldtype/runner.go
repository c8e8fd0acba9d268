package foldtype

import (
	"context"
	"encoding/json"
	"time"
)

// Runner is the non-generic view of an engine that whatever feeds it holds: *foldstream.Engine
// implements it for every state type, a host hosts one (host.Add), and the in-memory stream of
// package testsupport pushes its commits to one (MemoryStream.Register). It lives here, not beside
// the engine, so that a holder names it without the engine's type parameter.
type Runner interface {
	// Slug returns the processor's slug.
	Slug() string
	// Consumes returns the contract's consumes list (nil = every durable event); use it with
	// [ConsumesEvent] for subscription filters.
	Consumes() []string
	// ProcessEventBatch is a push: committed events and the range they prove contiguous.
	ProcessEventBatch(ctx context.Context, events []Event, r ScannedRange) error
	// CatchUpFromLog reads the log from the cursor to the head.
	CatchUpFromLog(ctx context.Context) error
	// Revive is the host's call when a claim fell due.
	Revive(ctx context.Context) error
	// WaitUntilProcessed waits until the cursor reaches offset (timeout 0: the engine's default).
	WaitUntilProcessed(ctx context.Context, offset int64, timeout time.Duration) error
	// SnapshotJSON returns the cursor and the state's JSON after catching up if needed.
	SnapshotJSON(ctx context.Context) (Snapshot[json.RawMessage], error)
	// LiveSnapshot returns the live state's revision and JSON after catching up if needed.
	LiveSnapshot(ctx context.Context) (LiveSnapshot[json.RawMessage], error)
	// PublishLiveState re-projects the state; call it when a runtime field changed outside a batch.
	PublishLiveState()
	// ReducedThroughOffset returns the cursor.
	ReducedThroughOffset() int64
	// Drain waits until the serial chain is idle and every background attempt settled, or ctx ends.
	Drain(ctx context.Context) error
	// Close cancels the engine's running work and background attempts, waits for them, and makes
	// every later call fail with code CLOSED.
	Close(ctx context.Context) error
}
