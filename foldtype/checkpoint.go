package foldtype

import (
	"context"
	"encoding/json"
	"unicode/utf8"

	"github.com/foldstream/foldstream/internal/rawjson"
)

// MaxCheckpointChars is the checkpoint state ceiling: 2*1024*1024 - 4096 characters
// (docs/engine.md#checkpoints), counted in UTF-16 code units like JavaScript's string length.
const MaxCheckpointChars = 2*1024*1024 - 4096

// Checkpoint is one reduce checkpoint row (docs/engine.md#checkpoints).
type Checkpoint struct {
	// ReducerVersion is the contract version that produced the row.
	ReducerVersion string
	// ReducedThroughOffset is the cursor.
	ReducedThroughOffset int64
	// State is the state's JSON; nil means NULL ("the reduce never changed it"), read back as the
	// initial state.
	State json.RawMessage
}

// CheckpointStorage stores reduce checkpoints by processor slug.
type CheckpointStorage interface {
	// ReadCheckpoint returns the row for slug, or ok=false when there is none.
	ReadCheckpoint(ctx context.Context, slug string) (Checkpoint, bool, error)
	// WriteCheckpoint upserts the row: version and cursor always; the state only when
	// stateChanged (otherwise the stored state is kept).
	WriteCheckpoint(ctx context.Context, slug string, cp Checkpoint, stateChanged bool) error
}

// CheckpointTooLargeError is the REDUCE_CHECKPOINT_TOO_LARGE refusal (docs/engine.md#checkpoints):
// data {slug, chars, maxChars}, not retryable, so the engine latches it
// (docs/engine.md#the-latch). A custom [CheckpointStorage] returns it for a state over
// [MaxCheckpointChars] (counted with [UTF16Len]).
func CheckpointTooLargeError(slug string, chars int) *Error {
	e := NewError(CodeReduceCheckpointTooLarge,
		map[string]any{"slug": slug, "chars": chars, "maxChars": MaxCheckpointChars},
		"checkpoint %s: the reduced state serializes to %d chars, over the %d-char ceiling of one storage cell (2 MB) \u2014 a reduce must keep a summary, not the events; nothing was written",
		rawjson.Quote(slug), chars, MaxCheckpointChars)
	e.Retryable = false
	return e
}

// UTF16Len counts s in UTF-16 code units, like JavaScript's string length: characters outside the
// Basic Multilingual Plane count 2, every other character 1 (invalid UTF-8 bytes count 1 each, as
// U+FFFD). The checkpoint and patch ceilings are counted with it; a custom [CheckpointStorage] uses
// it to apply [MaxCheckpointChars].
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return n
}
