package foldtype

import "time"

// The claim backoff (docs/engine.md#background-work-and-claims), shared by the engine and the store.
const (
	// ReviveAfter is how far ahead the engine claims its host's alarm when background work starts,
	// and the first step of the doubling backoff both the engine (a revive that finds work still in
	// flight) and the store (a revive that failed) use.
	ReviveAfter = 20 * time.Second
	// ReviveAfterMax caps that doubling backoff.
	ReviveAfterMax = 30 * time.Minute
)
