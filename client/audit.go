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
