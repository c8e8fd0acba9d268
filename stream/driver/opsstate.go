package driver

import "context"

// Processor operations state (docs/operations.md): what the host's state machine stores where
// every node reads it, also when the node that ran the processor is dead. One row per processor
// on a stream that is not simply running (a running processor has no row), and an append-only
// audit of the operators' verbs. Both drivers keep them in tables of their schema.

// ProcessorOpsReader is optionally implemented by a [Reader]: the processor state rows and the
// audit records.
type ProcessorOpsReader interface {
	// ProcessorStates returns the state rows q selects, ordered by path then slug.
	ProcessorStates(ctx context.Context, q ProcessorStateQuery) ([]ProcessorStateRow, error)
	// AuditRecords returns the audit records q selects, newest first.
	AuditRecords(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
}

// ProcessorOpsTx is optionally implemented by a [Tx]: the write side of ProcessorOpsReader.
type ProcessorOpsTx interface {
	// PutProcessorState inserts or replaces the row of (r.Path, r.Slug). With fence set it is
	// fenced as WriteCheckpoint is: LEASE_LOST, nothing written, when the lease moved on.
	PutProcessorState(ctx context.Context, r ProcessorStateRow, fence *Fence) error
	// DeleteProcessorStateRow removes the row of (path, slug) (no error when there is none),
	// fenced as PutProcessorState.
	DeleteProcessorStateRow(ctx context.Context, path, slug string, fence *Fence) error
	// InsertAuditRecord appends r (its ID is assigned by the database).
	InsertAuditRecord(ctx context.Context, r AuditRecord) error
}

// ProcessorStateRow is the stored state of one processor on one stream.
type ProcessorStateRow struct {
	Path, Slug string
	// State is "failing" or "paused" (a running processor has no row).
	State string
	// Reason is the operator's (or the failure policy's) reason for a pause.
	Reason string
	// Code, Message, Offset, EventType and Attempts describe the failure the processor is
	// failing on, or was failing on when it was paused (Code empty: none).
	Code      string
	Message   string
	Offset    int64
	EventType string
	Attempts  int
	// Node is the node that wrote the row; By who asked (an operator's name, "policy", "host").
	Node string
	By   string
	// SinceMs is when the processor entered State (Unix milliseconds).
	SinceMs int64
}

// ProcessorStateQuery selects state rows: every row when all its fields are empty.
type ProcessorStateQuery struct {
	// Path selects one stream's rows; Prefix the rows of streams whose path starts with it.
	Path   string
	Prefix string
	// Paths, when not nil, selects the rows of these streams (none when it is empty), read in one
	// query however many there are: a bulk verb reads the rows of a page of streams at once.
	Paths []string
	// Slug selects one processor.
	Slug string
	// State selects one state ("paused", "failing").
	State string
}

// AuditRecord is one operator's verb on a processor: who, what, when, why, and how it ended.
type AuditRecord struct {
	ID      int64
	AtMs    int64
	Actor   string
	Op      string
	Path    string
	Slug    string
	Reason  string
	Outcome string
	Node    string
}

// AuditQuery selects audit records: the newest Limit (0: 100) of path and slug when set.
type AuditQuery struct {
	Path  string
	Slug  string
	Limit int
}

// ParkedEventsReader is optionally implemented by a [Reader]: the parked events, set aside by an
// operator's skip (or the failure policy's) with the failure they met (docs/operations.md#skip).
type ParkedEventsReader interface {
	// ParkedEvents returns the parked events q selects, ordered by path, slug, then offset.
	ParkedEvents(ctx context.Context, q ParkedEventQuery) ([]ParkedEventRow, error)
	// ParkedEventCounts returns how many events are parked, by processor slug (every stream).
	ParkedEventCounts(ctx context.Context) (map[string]int, error)
}

// ParkedEventsTx is optionally implemented by a [Tx]: the write side of ParkedEventsReader.
type ParkedEventsTx interface {
	// PutParkedEvent inserts or replaces the row of (r.Path, r.Slug, r.Offset). With fence set it
	// is fenced as WriteCheckpoint is: LEASE_LOST, nothing written, when the lease moved on.
	PutParkedEvent(ctx context.Context, r ParkedEventRow, fence *Fence) error
	// DeleteParkedEvent removes the row of (path, slug, offset) and reports whether there was
	// one, fenced as PutParkedEvent.
	DeleteParkedEvent(ctx context.Context, path, slug string, offset int64, fence *Fence) (bool, error)
}

// ParkedEventRow is one event a processor was moved past without its ProcessEvent, and the
// failure it met there.
type ParkedEventRow struct {
	Path, Slug string
	// Offset and EventType name the event.
	Offset    int64
	EventType string
	// Code, Message and Attempts are its last failure (a skip's, or a failed redrive's).
	Code     string
	Message  string
	Attempts int
	// Node is the node that wrote the row; AtMs when (Unix milliseconds).
	Node string
	AtMs int64
	// By is who skipped it (an operator's name, or "policy") and Reason why.
	By     string
	Reason string
}

// ParkedEventQuery selects parked events: every row when all its fields are empty.
type ParkedEventQuery struct {
	// Path selects one stream's rows.
	Path string
	// Slug selects one processor's.
	Slug string
	// Offset selects one event (0: every one).
	Offset int64
}
