package foldstream

// ProcessorStatus is what a host reports about one processor on one stream, for consoles, listing
// routes and health checks.
type ProcessorStatus struct {
	// Slug and Version are the processor's contract slug and version ("" when the host did not
	// build the engine and cannot tell).
	Slug    string `json:"slug"`
	Version string `json:"version,omitempty"`
	// Pattern is the path or pattern the processor was registered on.
	Pattern string `json:"pattern"`
	// Offset is the processor's reduced-through offset: its engine's cursor while open, else its
	// stored checkpoint's (0 before its first checkpoint).
	Offset int64 `json:"offset"`
	// Open reports whether the processor's engine is open now (a pattern's engines open on demand).
	Open bool `json:"open"`
	// LiveRev is the live state's revision while the engine is open; 0 when it is closed.
	LiveRev int64 `json:"liveRev,omitempty"`
	// Parked is the error that parked the processor (code PROCESSOR_PARKED, its cause attached),
	// nil while it runs. ParkedMessage is its message, for JSON.
	Parked        *Error `json:"-"`
	ParkedMessage string `json:"parked,omitempty"`
}
