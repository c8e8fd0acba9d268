package client

import (
	"context"
	"net/url"
	"strings"

	"github.com/foldstream/foldstream/internal/wire"
)

// ProcessorPrefix is where a foldstream server serves its processors (server.DefaultProcessorPrefix).
const ProcessorPrefix = wire.ProcessorPrefix

// ProcessorOpResult is a server's answer to an operator's verb on a processor.
type ProcessorOpResult struct {
	// Op is the verb done ("retry").
	Op string `json:"op"`
	// Slug is the processor's slug.
	Slug string `json:"slug"`
	// Stream is the stream's name (its path without the leading slash).
	Stream string `json:"stream"`
	// Rebuild is where the rebuild is, in the answer to "rebuild"; nil for the other verbs.
	Rebuild *ProcessorRebuild `json:"rebuild,omitempty"`
}

// ProcessorOp asks the foldstream server at baseURL to run an operator's verb (docs/operations.md)
// on processor slug of the stream at path (a store path, "/orders"): "retry" runs a failing
// processor's next attempt now. reason, when not empty, goes to the server's audit line. The
// request needs a token of the ops scope (o.Header's Authorization). It sends one request and does
// not retry: a verb is an operator's decision, made again by the operator.
func ProcessorOp(ctx context.Context, baseURL, path, slug, op, reason string, o ListOptions) (ProcessorOpResult, error) {
	q := url.Values{"op": {op}}
	var res ProcessorOpResult
	if err := processorVerb(ctx, baseURL, path, slug, q, reason, o, &res); err != nil {
		return ProcessorOpResult{}, err
	}
	return res, nil
}

// processorVerb POSTs an operator's verb (q: op and its parameters) to the processor route and
// decodes the server's JSON answer into out.
func processorVerb(ctx context.Context, baseURL, path, slug string, q url.Values, reason string, o ListOptions, out any) error {
	const what = "processor op"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return &Error{Code: CodeInvalidArgument, Op: what, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	if slug == "" || strings.Contains(slug, "/") || strings.Trim(path, "/") == "" {
		return &Error{Code: CodeInvalidArgument, Op: what, Message: "need a processor slug and a stream path"}
	}
	if reason != "" {
		q.Set("reason", reason)
	}
	u := strings.TrimRight(baseURL, "/") + (&url.URL{Path: ProcessorPrefix + slug + "/" + strings.TrimPrefix(path, "/")}).EscapedPath() +
		"?" + q.Encode()
	return sendJSON(ctx, "POST", what, u, o, out, "the answer is not the expected JSON")
}
