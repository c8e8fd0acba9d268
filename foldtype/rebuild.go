package foldtype

// ProcessorRebuild is a processor's next version being rebuilt beside the running one
// (docs/operations.md#rebuild-beside-the-running-version), as the status and the rebuild verb
// report it.
type ProcessorRebuild struct {
	// Version is the version being rebuilt.
	Version string `json:"version"`
	// Offset is the offset the rebuild has folded through (its side row's cursor once written).
	Offset int64 `json:"offset"`
	// Lag is how far Offset is behind the running version's offset, or the head of the log the
	// rebuild last read when the running version is not known (in offsets); 0 once caught up.
	Lag int64 `json:"lag"`
	// Switched reports that the switch was written: the rebuilt version is the running one.
	Switched bool `json:"switched,omitempty"`
	// Error is the last failure of the rebuild's folding (it is retried by asking again);
	// empty while it goes well.
	Error *ProcessorError `json:"error,omitempty"`
}
