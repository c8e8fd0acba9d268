package foldtype

// The two snapshot shapes, one per purpose, each in the representation its reader needs: S is
// the state's Go type where a Go caller reads it (Engine.Snapshot, LiveState.Snapshot) and
// json.RawMessage where a host hands it out and a server writes it (Host.Snapshot,
// Host.LiveSnapshot, Engine.SnapshotJSON, Engine.LiveSnapshot).

// Snapshot is a processor's cursor and reduced state, read together; as JSON
// {"offset": …, "state": …}.
type Snapshot[S any] struct {
	// Offset is the processor's reduced-through offset.
	Offset int64 `json:"offset"`
	// State is the reduced state.
	State S `json:"state"`
}

// LiveSnapshot is a live state's revision and projected state, read together; as JSON
// {"rev": …, "state": …}. A client seeds from it and applies the deltas whose from is Rev.
type LiveSnapshot[S any] struct {
	// Rev is the live state's revision.
	Rev int64 `json:"rev"`
	// State is the projected state.
	State S `json:"state"`
}
