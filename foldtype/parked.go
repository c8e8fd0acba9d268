package foldtype

import "time"

// ParkedEvent is one event a processor was moved past without its ProcessEvent — an operator's
// skip, or the failure policy's — with the failure it met (docs/operations.md#skip). It stays
// listed until a redrive runs it successfully or an operator discards it.
type ParkedEvent struct {
	// Offset and Type name the event on the processor's stream.
	Offset int64  `json:"offset"`
	Type   string `json:"type"`
	// Code and Message are its last failure: the one it was skipped on, or a failed redrive's.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Attempts counts the failed attempts at it: those before the skip, plus failed redrives.
	Attempts int `json:"attempts"`
	// Node is the node that recorded the failure; At when.
	Node string    `json:"node"`
	At   time.Time `json:"at"`
	// By is who skipped it (a token's name, or "policy") and Reason why.
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// RedriveResult is what a redrive of parked events did (docs/operations.md#redrive).
type RedriveResult struct {
	// Redriven lists the offsets of the events that ran successfully and left the list, in the
	// order they ran.
	Redriven []int64 `json:"redriven"`
}
