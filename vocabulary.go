package foldstream

import (
	"encoding/json"

	"github.com/foldstream/foldstream/foldtype"
)

// The shared vocabulary lives in package foldtype (see its doc); the names below are aliases of the
// foldtype types that the engine's own API is written in, so a processor and its tests can be
// written against this package alone. Everything else of the vocabulary — the error codes and their
// sentinels, the platform event types, the rules every stream applies, the status and snapshot
// shapes a host reports — is named through foldtype: errors.Is(err, foldtype.ErrOffsetConflict).

// Event is a committed event ([foldtype.Event]).
type Event = foldtype.Event

// EventInput is what a writer appends ([foldtype.EventInput]).
type EventInput = foldtype.EventInput

// Stream is what an engine runs against ([foldtype.Stream]).
type Stream = foldtype.Stream

// ReadPage is one page of a log read ([foldtype.ReadPage]).
type ReadPage = foldtype.ReadPage

// ScannedRange is the offset window a delivery proves contiguous ([foldtype.ScannedRange]).
type ScannedRange = foldtype.ScannedRange

// Checkpoint is one reduce checkpoint row ([foldtype.Checkpoint]).
type Checkpoint = foldtype.Checkpoint

// CheckpointStorage stores reduce checkpoints by processor slug ([foldtype.CheckpointStorage]).
type CheckpointStorage = foldtype.CheckpointStorage

// Clock is the source of time and timers the engine is given ([foldtype.Clock]).
type Clock = foldtype.Clock

// Error is the coded error of the one catalogue ([foldtype.Error]).
type Error = foldtype.Error

// Code is a catalogue error code ([foldtype.Code]).
type Code = foldtype.Code

// JSON marshals v for use as a payload or metadata; it is [foldtype.JSON], here so that processor
// code that builds events needs no second import.
func JSON(v any) json.RawMessage { return foldtype.JSON(v) }
