package foldtype

import "time"

// CodeProcessEventFailed is the code of a ProcessEvent call that returned an error without a
// catalogue code, or panicked (see [ProcessEventError]).
const CodeProcessEventFailed Code = "PROCESS_EVENT_FAILED"

// CodeProcessorFailing is the code a host answers reads of a failing processor with: its
// ProcessEvent keeps failing on one event and it retries with backoff (503 over HTTP; the error's
// Data holds the failure, see [ProcessorFailure]).
const CodeProcessorFailing Code = "PROCESSOR_FAILING"

// ErrProcessorFailing matches (with errors.Is) every PROCESSOR_FAILING error.
var ErrProcessorFailing = &Error{Code: CodeProcessorFailing}

// ProcessorFailure is a failing processor's state in a [ProcessorStatus]: what failed, where,
// and when the host tries again.
type ProcessorFailure struct {
	// Code is the failure's catalogue code (PROCESS_EVENT_FAILED for an uncoded error or panic).
	Code Code `json:"code"`
	// Message is the failure's message.
	Message string `json:"message"`
	// Offset is the offset of the event that fails (0 for the eventless pass).
	Offset int64 `json:"offset"`
	// Attempts counts the failed attempts in a row.
	Attempts int `json:"attempts"`
	// NextRetry is when the host tries again (zero while the processor is paused).
	NextRetry time.Time `json:"nextRetry"`
	// EventType is the type of the event that fails, when known.
	EventType string `json:"eventType,omitempty"`
	// Since is when the processor started failing on this event, when known.
	Since time.Time `json:"since,omitzero"`
	// Node is the node that ran the failing attempts, when known.
	Node string `json:"node,omitempty"`
}

// SkippedEvents counts the events one processor skipped for one reason: a payload that breaks
// its event's schema (reason SiteReducePayload) or a Reduce that failed or panicked (SiteReduce).
type SkippedEvents struct {
	// Reason is the failure site: processor.reduce.payload or processor.reduce.
	Reason string `json:"reason"`
	// Count is how many events were skipped for this reason since the engine opened.
	Count int64 `json:"count"`
	// LastOffset is the offset of the last one.
	LastOffset int64 `json:"lastOffset"`
	// LastError is the last one's error message.
	LastError string `json:"lastError"`
}
