package client

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ParkedEvent is one event a processor was moved past without its ProcessEvent, with the failure
// it met (docs/operations.md#skip), as a server lists it.
type ParkedEvent struct {
	Offset   int64     `json:"offset"`
	Type     string    `json:"type"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	Attempts int       `json:"attempts"`
	Node     string    `json:"node"`
	At       time.Time `json:"at"`
	By       string    `json:"by"`
	Reason   string    `json:"reason"`
}

// ProcessorSkipResult is a server's answer to a skip: the event parked.
type ProcessorSkipResult struct {
	ProcessorOpResult
	Parked ParkedEvent `json:"parked"`
}

// ProcessorRedriveResult is a server's answer to a redrive: the offsets of the parked events that
// ran and left the list, in the order they ran.
type ProcessorRedriveResult struct {
	ProcessorOpResult
	Redriven []int64 `json:"redriven"`
}

// ProcessorSkip asks the server at baseURL to move failing processor slug of the stream at path
// past the event it fails on, parking it (docs/operations.md#skip). It needs a token of the ops
// scope and is sent once, never retried.
func ProcessorSkip(ctx context.Context, baseURL, path, slug, reason string, o ListOptions) (ProcessorSkipResult, error) {
	var res ProcessorSkipResult
	if err := processorVerb(ctx, baseURL, path, slug, url.Values{"op": {"skip"}}, reason, o, &res); err != nil {
		return ProcessorSkipResult{}, err
	}
	return res, nil
}

// ProcessorRedrive asks the server at baseURL to run the parked events of processor slug on path
// again, in offset order (offset 0: every one; else that one). A parked event that fails again
// stays parked and the answer is the failure (PROCESSOR_FAILING). Ops scope; sent once.
func ProcessorRedrive(ctx context.Context, baseURL, path, slug string, offset int64, reason string, o ListOptions) (ProcessorRedriveResult, error) {
	q := url.Values{"op": {"redrive"}}
	if offset != 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	var res ProcessorRedriveResult
	if err := processorVerb(ctx, baseURL, path, slug, q, reason, o, &res); err != nil {
		return ProcessorRedriveResult{}, err
	}
	return res, nil
}

// ProcessorDiscard asks the server at baseURL to drop the parked event at offset of processor slug
// on path without running it. Ops scope; sent once.
func ProcessorDiscard(ctx context.Context, baseURL, path, slug string, offset int64, reason string, o ListOptions) (ProcessorOpResult, error) {
	var res ProcessorOpResult
	q := url.Values{"op": {"discard"}, "offset": {strconv.FormatInt(offset, 10)}}
	if err := processorVerb(ctx, baseURL, path, slug, q, reason, o, &res); err != nil {
		return ProcessorOpResult{}, err
	}
	return res, nil
}

// ProcessorParked returns the parked events of processor slug on the stream at path, by offset.
// It needs a token of the ops scope.
func ProcessorParked(ctx context.Context, baseURL, path, slug string, o ListOptions) ([]ParkedEvent, error) {
	const what = "processor parked events"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return nil, &Error{Code: CodeInvalidArgument, Op: what, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	if slug == "" || strings.Contains(slug, "/") || strings.Trim(path, "/") == "" {
		return nil, &Error{Code: CodeInvalidArgument, Op: what, Message: "need a processor slug and a stream path"}
	}
	u := strings.TrimRight(baseURL, "/") + (&url.URL{Path: ProcessorPrefix + slug + "/" + strings.TrimPrefix(path, "/")}).EscapedPath() +
		"?parked=1"
	var res struct {
		Parked []ParkedEvent `json:"parked"`
	}
	if err := getJSON(ctx, what, u, o, &res, "the answer is not the expected JSON"); err != nil {
		return nil, err
	}
	return res.Parked, nil
}
