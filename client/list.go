package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ListPath is where a foldstream server lists its streams (an extension outside the Durable
// Streams protocol's paths; docs/server.md#stream-listing).
const ListPath = "/v1/streams"

// MaxListLimit is the largest page a server lists at once.
const MaxListLimit = 1000

// ListOptions select one page of ListStreams.
type ListOptions struct {
	// Prefix keeps only stream paths that start with it ("/carts/"). Empty lists every stream.
	Prefix string
	// After keeps only paths after it: pass the Next of the previous page.
	After string
	// Limit caps the page; 0 lets the server choose (100). At most 1000.
	Limit int
	// HTTPClient sends the request. Defaults to DefaultHTTPClient().
	HTTPClient *http.Client
	// Header is added to the request (for example Authorization).
	Header http.Header
}

// StreamEntry is one stream of a listing.
type StreamEntry struct {
	// Path is the stream's path on the server ("/carts/42" is served at /v1/stream/carts/42).
	Path string `json:"path"`
	// ContentType is the content type given at creation.
	ContentType string `json:"contentType"`
	// Tail is the offset after the last message; read from it to follow the stream.
	Tail string `json:"tail"`
	// Closed reports whether the stream is closed.
	Closed bool `json:"closed"`
	// CreatedAt is when the stream was created.
	CreatedAt time.Time `json:"createdAt"`
	// Paused reports whether the stream is paused; PauseReason is then the reason appends are
	// refused with (STREAM_PAUSED).
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
}

// StreamPage is one page of a listing.
type StreamPage struct {
	// Streams are in path order.
	Streams []StreamEntry `json:"streams"`
	// Next, when not empty, is the After of the next page; empty on the last page.
	Next string `json:"next"`
}

// ListStreams fetches one page of the streams of the foldstream server at baseURL (for example
// "http://127.0.0.1:4437"). Page through everything by passing each page's Next as the next
// call's After until it is empty. It sends one request and does not retry.
func ListStreams(ctx context.Context, baseURL string, o ListOptions) (StreamPage, error) {
	const op = "list streams"
	b, err := url.Parse(baseURL)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
		return StreamPage{}, &Error{Code: CodeInvalidArgument, Op: op, URL: baseURL, Message: "server URL must be an absolute http(s) URL", Err: err}
	}
	if o.Limit < 0 {
		return StreamPage{}, &Error{Code: CodeInvalidArgument, Op: op, Message: "limit must be 0 or more"}
	}
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	u := strings.TrimRight(baseURL, "/") + ListPath
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var page StreamPage
	if err := getJSON(ctx, op, u, o, &page, "the listing is not the expected JSON"); err != nil {
		return StreamPage{}, err
	}
	return page, nil
}

// getJSON sends one GET for u with o's headers and client and decodes a 200 answer's JSON body
// into out; any other answer is the server's coded error (parseMsg names a body that does not
// decode). It does not retry.
func getJSON(ctx context.Context, op, u string, o ListOptions, out any, parseMsg string) error {
	return sendJSON(ctx, http.MethodGet, op, u, o, out, parseMsg)
}

// sendJSON is getJSON with another method (a POST without a body).
func sendJSON(ctx context.Context, method, op, u string, o ListOptions, out any, parseMsg string) error {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return &Error{Code: CodeInvalidArgument, Op: op, URL: u, Err: err}
	}
	for k, vs := range o.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = DefaultHTTPClient()
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Code: CodeNetwork, Op: op, URL: u, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return statusError(op, u, resp, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &Error{Code: CodeParse, Op: op, URL: u, Message: parseMsg, Err: err}
	}
	return nil
}
