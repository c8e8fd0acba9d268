package stream

import (
	"context"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/processors"
)

// What the store keeps for processors besides their checkpoints — claims and alarms, parked
// events, processor state rows and the operators' audit — is package stream/internal/processors;
// the event face offers it as its own methods, and the names below are aliases of its types.

// DueClaim is a claim the alarm loop spent and hands to the handler ([processors.DueClaim]).
type DueClaim = processors.DueClaim

// AlarmHandler revives the processor a due claim names ([processors.AlarmHandler]). On an error
// (or a cancelled context) the claim's retry row, written with backoff when it was spent,
// stands; on success it is deleted.
type AlarmHandler = processors.AlarmHandler

// ClaimRow is a stored claim ([processors.ClaimRow]).
type ClaimRow = processors.ClaimRow

// Claim records that processor slug on the stream at path must be revived by at; the zero time
// releases the claim. A new claim replaces the previous one of the same processor.
func (e *Events) Claim(ctx context.Context, path, slug string, at time.Time) error {
	return e.s.procs.Claim(ctx, path, slug, at)
}

// Claims lists the stored claims, earliest first.
func (e *Events) Claims(ctx context.Context) ([]ClaimRow, error) { return e.s.procs.Claims(ctx) }

// StartAlarms starts the alarm loop with handler; claims already due fire at once. Only one loop
// runs per store; [Store.Close] or StopAlarms stops it. Handlers get a context that ends when the
// loop stops.
func (e *Events) StartAlarms(handler AlarmHandler) error { return e.s.procs.StartAlarms(handler) }

// StopAlarms stops the alarm loop: no new handler starts, handlers already running get their
// context cancelled, and StopAlarms waits for them to return.
func (e *Events) StopAlarms() { e.s.procs.StopAlarms() }

// PutParkedEvent stores the parked event r (docs/operations.md#skip), replacing the row of the
// same processor and offset. With fence set, only while that lease is held at its generation:
// else LEASE_LOST, nothing written.
func (e *Events) PutParkedEvent(ctx context.Context, r driver.ParkedEventRow, fence *driver.Fence) error {
	return e.s.procs.PutParkedEvent(ctx, r, fence)
}

// RemoveParkedEvent removes the parked event at offset of processor slug on path and reports
// whether there was one. fence as PutParkedEvent.
func (e *Events) RemoveParkedEvent(ctx context.Context, path, slug string, offset int64, fence *driver.Fence) (bool, error) {
	return e.s.procs.RemoveParkedEvent(ctx, path, slug, offset, fence)
}

// ParkedEvents returns the parked events q selects, by path, slug, then offset.
func (e *Events) ParkedEvents(ctx context.Context, q driver.ParkedEventQuery) ([]driver.ParkedEventRow, error) {
	return e.s.procs.ParkedEvents(ctx, q)
}

// ParkedEventCounts returns how many events are parked, by processor slug, over every stream.
func (e *Events) ParkedEventCounts(ctx context.Context) (map[string]int, error) {
	return e.s.procs.ParkedEventCounts(ctx)
}

// PutProcessorState stores the state row of (r.Path, r.Slug) (docs/operations.md), replacing the
// one there. With fence set, only while that lease is held at its generation: else LEASE_LOST,
// nothing written.
func (e *Events) PutProcessorState(ctx context.Context, r driver.ProcessorStateRow, fence *driver.Fence) error {
	return e.s.procs.PutProcessorState(ctx, r, fence)
}

// ClearProcessorState removes the state row of processor slug on path: it runs. fence as
// PutProcessorState.
func (e *Events) ClearProcessorState(ctx context.Context, path, slug string, fence *driver.Fence) error {
	return e.s.procs.ClearProcessorState(ctx, path, slug, fence)
}

// ProcessorStates returns the state rows q selects, by path then slug.
func (e *Events) ProcessorStates(ctx context.Context, q driver.ProcessorStateQuery) ([]driver.ProcessorStateRow, error) {
	return e.s.procs.ProcessorStates(ctx, q)
}

// AppendAudit appends an operator's verb to the audit.
func (e *Events) AppendAudit(ctx context.Context, r driver.AuditRecord) error {
	return e.s.procs.AppendAudit(ctx, r)
}

// Audit returns the audit records q selects, newest first.
func (e *Events) Audit(ctx context.Context, q driver.AuditQuery) ([]driver.AuditRecord, error) {
	return e.s.procs.Audit(ctx, q)
}
