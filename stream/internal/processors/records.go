// Package processors is what the store keeps for the processors that run on it besides their
// checkpoints (docs/store.md#the-kernel-and-its-layers): claims and the alarm loop that spends
// them (claims.go), parked events (parked.go), and the processor state rows and the operators'
// audit (opsstate.go). It calls only down, the kernel for its writes and reads; the event face
// offers it as its own methods (stream.Events.Claim, .PutParkedEvent, .PutProcessorState, …).
package processors

import (
	"log/slog"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Records is one store's processor records and its alarm loop. Its methods are safe for
// concurrent use.
type Records struct {
	k      *kernel.Store
	clock  foldtype.Clock
	log    *slog.Logger
	alarms alarmState
}

// New returns the processor records of the store whose kernel is k, with the clock the alarms
// are timed on and the logger their failures go to.
func New(k *kernel.Store, clock foldtype.Clock, log *slog.Logger) *Records {
	return &Records{k: k, clock: clock, log: log}
}

// Halt is the records' part in the store's Close when it stops intake: the alarm loop takes no
// more alarms, and the running handlers get their context cancelled.
func (p *Records) Halt() { p.haltAlarms() }

// Drain waits for the running alarm handlers: the records' part in the store's Close drain.
func (p *Records) Drain() { p.alarms.wg.Wait() }
