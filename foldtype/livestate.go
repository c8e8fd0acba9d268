package foldtype

import "github.com/foldstream/foldstream/internal/rawjson"

// LiveStateDelta is the payload of a [LiveStateChangedType] event: Patch turns the state at rev
// From into the state at rev To; a nil Patch (JSON null) means "re-seed".
type LiveStateDelta struct {
	Key   string    `json:"key"`
	From  int64     `json:"from"`
	To    int64     `json:"to"`
	Patch []PatchOp `json:"patch"`
}

// PatchOp is one RFC 6902 operation of a live-state patch: add, replace or remove.
type PatchOp = rawjson.PatchOp
