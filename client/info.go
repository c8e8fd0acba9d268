package client

import (
	"context"
	"net/url"
	"strings"
	"time"
)

// InfoPath is where a foldstream server describes one stream and the processors running on it
// (docs/server.md#stream-listing).
const InfoPath = "/v1/streams/info"

// ProcessorStatus is what a server reports about one processor on a stream (the JSON of
// foldtype.ProcessorStatus).
type ProcessorStatus struct {
	// Slug is the processor's slug.
	Slug string `json:"slug"`
	// Version is its contract version.
	Version string `json:"version"`
	// Offset is the offset it reduced through.
	Offset int64 `json:"offset"`
	// Open reports whether the host holds its engine open.
	Open bool `json:"open"`
	// State is "running", "failing" or "parked" (a host may report more).
	State string `json:"state,omitempty"`
	// Failing says what fails, where and when the host retries; nil unless failing.
	Failing *ProcessorFailure `json:"failing,omitempty"`
	// Parked is why a parked processor stopped; nil unless parked.
	Parked *ProcessorError `json:"parked,omitempty"`
	// Paused says who paused the processor, when and why; nil unless paused.
	Paused *ProcessorPause `json:"paused,omitempty"`
	// Skipped counts the events it skipped, by reason.
	Skipped []SkippedEvents `json:"skipped,omitempty"`
	// WaitingForStore is a write of the processor's engine (an emit or a checkpoint) that the
	// store could not take because its database was out of reach, being sent again, or its read
	// of the log ("log read") that the host tries again; nil when none waits. The processor is
	// not failing meanwhile.
	WaitingForStore *ProcessorStoreWait `json:"waitingForStore,omitempty"`
	// Owner is the node that runs the processor now (its lease holder), empty when no node
	// holds its lease; Generation is that lease's generation.
	Owner      string `json:"owner,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Rebuilding is the next version being rebuilt beside this one, with its lag; nil when none
	// is (docs/operations.md#rebuild-beside-the-running-version).
	Rebuilding *ProcessorRebuild `json:"rebuilding,omitempty"`
	// NextVersion is the next version registered for the processor and not switched to yet (the
	// rebuild verb switches to it); empty when none is.
	NextVersion string `json:"nextVersion,omitempty"`
}

// ProcessorRebuild is a processor's next version being rebuilt beside the running one.
type ProcessorRebuild struct {
	// Version is the version being rebuilt.
	Version string `json:"version"`
	// Offset is the offset it has folded through.
	Offset int64 `json:"offset"`
	// Lag is how far Offset is behind the running version's offset.
	Lag int64 `json:"lag"`
	// Switched reports that the rebuilt version runs now.
	Switched bool `json:"switched,omitempty"`
	// Error is the rebuild's last failure; nil while it goes well.
	Error *ProcessorError `json:"error,omitempty"`
}

// ProcessorFailure is a failing processor's failure.
type ProcessorFailure struct {
	Code      string    `json:"code"`
	Message   string    `json:"message"`
	Offset    int64     `json:"offset"`
	Attempts  int       `json:"attempts"`
	NextRetry time.Time `json:"nextRetry"`
	EventType string    `json:"eventType,omitempty"`
}

// ProcessorPause is a paused processor's pause: why, by whom, on which node, since when.
type ProcessorPause struct {
	Reason string    `json:"reason"`
	By     string    `json:"by,omitempty"`
	Node   string    `json:"node,omitempty"`
	Since  time.Time `json:"since"`
}

// ProcessorStoreWait is a processor's write being sent again while the store's database is out of
// reach: what, the last refusal, how many attempts, since when and when the engine gives up; or,
// for a "log read" of a catch-up its host tries again, when the host reads next.
type ProcessorStoreWait struct {
	Write     string    `json:"write"`
	Code      string    `json:"code"`
	Message   string    `json:"message"`
	Attempts  int       `json:"attempts"`
	Since     time.Time `json:"since"`
	GivesUpAt time.Time `json:"givesUpAt,omitzero"` // zero for a "log read"
	NextRetry time.Time `json:"nextRetry,omitzero"` // zero for a write
}

// ProcessorError is a coded reason in a ProcessorStatus.
type ProcessorError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SkippedEvents counts the events a processor skipped for one reason.
type SkippedEvents struct {
	Reason     string `json:"reason"`
	Count      int64  `json:"count"`
	LastOffset int64  `json:"lastOffset"`
	LastError  string `json:"lastError"`
}

// StreamDetail is a stream and the processors running on it; Processors is nil when the server
// runs no processor host.
type StreamDetail struct {
	StreamEntry
	Processors []ProcessorStatus `json:"processors"`
}

// StreamInfo describes the stream at path (a store path, "/carts/42") on the foldstream server at
// baseURL, with its processors. o's Prefix, After and Limit are ignored. It sends one request and
// does not retry.
func StreamInfo(ctx context.Context, baseURL, path string, o ListOptions) (StreamDetail, error) {
	const op = "stream info"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return StreamDetail{}, &Error{Code: CodeInvalidArgument, Op: op, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	u := strings.TrimRight(baseURL, "/") + InfoPath + "?" + url.Values{"path": {path}}.Encode()
	var d StreamDetail
	if err := getJSON(ctx, op, u, o, &d, "the stream information is not the expected JSON"); err != nil {
		return StreamDetail{}, err
	}
	return d, nil
}
