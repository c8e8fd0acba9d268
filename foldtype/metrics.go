package foldtype

// ProcessEventBuckets are the upper bounds, in seconds, of the ProcessEvent duration histogram a
// host keeps per processor ([ProcessorTotals].DurationBuckets): 0.1 ms to about 37 s, each 2.5
// times the last, from an in-memory reaction to a call that waited out a slow provider.
var ProcessEventBuckets = []float64{
	0.0001, 0.00025, 0.000625, 0.0015625, 0.00390625, 0.009765625, 0.0244140625,
	0.06103515625, 0.152587890625, 0.3814697265625, 0.95367431640625, 2.384185791015625,
	5.9604644775390625, 14.901161193847656, 37.25290298461914,
}

// ProcessorTotals are the running totals of one processor, by slug, on one host: the sums over
// every engine the host ran for that slug since the processor was registered, whichever stream
// and however often its engines closed and reopened. Every field only grows.
type ProcessorTotals struct {
	// Slug is the processor's contract slug.
	Slug string
	// Processed counts the ProcessEvent calls for an event that returned nil and whose blockers
	// settled (an event processed again after a retried range counts again).
	Processed uint64
	// Emitted counts the events its ProcessEvent calls and blockers appended.
	Emitted uint64
	// Skipped counts the events it skipped, by reason (processor.reduce.payload,
	// processor.reduce).
	Skipped map[string]uint64
	// Failures counts its failed ProcessEvent calls, by the failure's code.
	Failures map[Code]uint64
	// DurationBuckets holds, for each bound of ProcessEventBuckets in order, how many processed
	// events took at most that long (cumulative, as a Prometheus histogram counts).
	DurationBuckets []uint64
	// DurationCount is how many durations were observed (Processed), DurationSum their sum in
	// seconds.
	DurationCount uint64
	DurationSum   float64
}

// LeaseTotals are what one host did with the leases under which its processors run
// (docs/postgres.md#processors-and-leases).
type LeaseTotals struct {
	// Held is how many processor leases the host holds now.
	Held int
	// Takeovers counts the processor leases it acquired that another node held last.
	Takeovers uint64
	// Handovers counts the processor leases it gave up for another node to take (to the node
	// preferred for the processor, or at shutdown).
	Handovers uint64
}
