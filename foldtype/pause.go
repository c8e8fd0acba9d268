package foldtype

import "time"

// StatePaused is the [ProcessorStatus].State of a processor an operator, or its failure policy,
// paused: no node runs its ProcessEvent, reduces its events or writes its checkpoint until it is
// resumed; appends to its stream still land (docs/operations.md).
const StatePaused = "paused"

// CodeProcessorPaused is the code of a wait on a paused processor (503 over HTTP): it does not move
// until an operator resumes it. Plain reads answer the last good state instead, marked as such.
const CodeProcessorPaused Code = "PROCESSOR_PAUSED"

// ErrProcessorPaused matches (with errors.Is) every PROCESSOR_PAUSED error.
var ErrProcessorPaused = &Error{Code: CodeProcessorPaused}

// ProcessorPause is a paused processor's state in a [ProcessorStatus].
type ProcessorPause struct {
	// Reason is why it was paused, as given.
	Reason string `json:"reason"`
	// By is who paused it: the operator's name, or "policy" for the failure policy.
	By string `json:"by,omitempty"`
	// Node is the node that stored the pause.
	Node string `json:"node,omitempty"`
	// Since is when it was paused.
	Since time.Time `json:"since"`
}
