package client

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AuditEntry is one operator's verb on a processor, as a server's audit keeps it.
type AuditEntry struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Op      string    `json:"op"`
	Path    string    `json:"path"`
	Slug    string    `json:"slug"`
	Reason  string    `json:"reason,omitempty"`
	Outcome string    `json:"outcome"`
	Node    string    `json:"node,omitempty"`
}

// ProcessorAudit returns the operators' verbs on processor slug of the stream at path, newest
// first, at most limit (0: the server's default, 100). It needs a token of the ops scope.
func ProcessorAudit(ctx context.Context, baseURL, path, slug string, limit int, o ListOptions) ([]AuditEntry, error) {
	const what = "processor audit"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return nil, &Error{Code: CodeInvalidArgument, Op: what, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	if slug == "" || strings.Contains(slug, "/") || strings.Trim(path, "/") == "" {
		return nil, &Error{Code: CodeInvalidArgument, Op: what, Message: "need a processor slug and a stream path"}
	}
	q := url.Values{"audit": {"1"}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	u := strings.TrimRight(baseURL, "/") + (&url.URL{Path: ProcessorPrefix + slug + "/" + strings.TrimPrefix(path, "/")}).EscapedPath() +
		"?" + q.Encode()
	var res struct {
		Audit []AuditEntry `json:"audit"`
	}
	if err := getJSON(ctx, what, u, o, &res, "the answer is not the expected JSON"); err != nil {
		return nil, err
	}
	return res.Audit, nil
}

// ProcessorBulkResult is a server's answer to a bulk verb over a path pattern.
type ProcessorBulkResult struct {
	Op         string `json:"op"`
	Slug       string `json:"slug"`
	Pattern    string `json:"pattern"`
	Matched    int    `json:"matched"`
	Changed    int    `json:"changed"`
	Failed     int    `json:"failed"`
	FirstError string `json:"firstError,omitempty"`
	DryRun     bool   `json:"dryRun"`
}

// ProcessorBulkOp asks the server at baseURL to run op ("pause", "resume", "retry", "skip" or
// "rebuild") on processor slug of every stream pattern matches ("/orders/*"); with dryRun it only
// counts what op would change. It needs a token of the ops scope and does not retry.
func ProcessorBulkOp(ctx context.Context, baseURL, pattern, slug, op, reason string, dryRun bool, o ListOptions) (ProcessorBulkResult, error) {
	const what = "processor bulk op"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return ProcessorBulkResult{}, &Error{Code: CodeInvalidArgument, Op: what, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	if slug == "" || strings.Contains(slug, "/") || pattern == "" {
		return ProcessorBulkResult{}, &Error{Code: CodeInvalidArgument, Op: what, Message: "need a processor slug and a path pattern"}
	}
	q := url.Values{"op": {op}, "pattern": {pattern}}
	if reason != "" {
		q.Set("reason", reason)
	}
	if dryRun {
		q.Set("dryRun", "1")
	}
	u := strings.TrimRight(baseURL, "/") + (&url.URL{Path: ProcessorPrefix + slug + "/"}).EscapedPath() + "?" + q.Encode()
	var res ProcessorBulkResult
	if err := sendJSON(ctx, "POST", what, u, o, &res, "the answer is not the expected JSON"); err != nil {
		return ProcessorBulkResult{}, err
	}
	return res, nil
}
