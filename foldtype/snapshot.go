package foldtype

import "encoding/json"

// JSONSnapshot is a processor's cursor and reduced state as JSON: the one snapshot shape a host
// hands out and a server writes ({"offset": …, "state": …}).
type JSONSnapshot struct {
	// Offset is the processor's reduced-through offset.
	Offset int64 `json:"offset"`
	// State is the reduced state's JSON.
	State json.RawMessage `json:"state"`
}

// LiveSnapshot is the live-state holder's revision and projected state, read together.
type LiveSnapshot struct {
	Rev   int64
	State json.RawMessage
}
