package client

import (
	"context"
	"net/url"
	"strconv"
)

// ProcessorReplayResult is a server's answer to a replay (docs/operations.md#replay).
type ProcessorReplayResult struct {
	ProcessorOpResult
	// From is the first offset replayed (1 for the start of the log).
	From int64 `json:"from"`
	// Through is the offset the processor had processed through when the replay began.
	Through int64 `json:"through"`
	// Effects is "none" (ProcessEvent did not run again for the events already processed) or
	// "again" (it runs again from From on).
	Effects string `json:"effects"`
	// Reduced is how many events the replay folded without ProcessEvent.
	Reduced int `json:"reduced"`
}

// ProcessorReplay asks the foldstream server at baseURL to replay processor slug of the stream at
// path from offset from (0: the start of the log): its state is rebuilt from the log, and effects
// ("none", the default when empty, or "again") says whether ProcessEvent runs again for the events
// it had processed. reason, when not empty, goes to the server's audit line. The request needs a
// token of the ops scope; it is sent once, never retried.
func ProcessorReplay(ctx context.Context, baseURL, path, slug string, from int64, effects, reason string, o ListOptions) (ProcessorReplayResult, error) {
	q := url.Values{"op": {"replay"}, "from": {strconv.FormatInt(from, 10)}}
	if effects != "" {
		q.Set("effects", effects)
	}
	var res ProcessorReplayResult
	if err := processorVerb(ctx, baseURL, path, slug, q, reason, o, &res); err != nil {
		return ProcessorReplayResult{}, err
	}
	return res, nil
}
