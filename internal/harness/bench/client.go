package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/internal/wire"
)

// Protocol header names (shared with the server and client: internal/wire).
const (
	hdrNextOffset    = wire.HeaderStreamNextOffset
	hdrUpToDate      = wire.HeaderStreamUpToDate
	hdrProducerID    = wire.HeaderProducerID
	hdrProducerEpoch = wire.HeaderProducerEpoch
	hdrProducerSeq   = wire.HeaderProducerSeq
	hdrExpectedSeq   = wire.HeaderProducerExpectedSeq
)

// jsonType is the content type of every benchmark stream: the issue measures JSON messages.
const jsonType = "application/json"

// maxCatchUpRequests bounds how many GETs one catch-up read may issue, so that a server that
// never reports Stream-Up-To-Date cannot keep the harness looping.
const maxCatchUpRequests = 100_000

// NewHTTPClient returns the load generator's HTTP client: plain HTTP/1.1 with keep-alive and enough
// idle connections per host for the largest scenario, so that connections are reused rather than
// re-dialled. Compression is off so both servers send the same identity bytes (the reference
// gzips when asked; foldstream need not).
func NewHTTPClient() *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
	return &http.Client{Transport: tr}
}

// Client talks the Durable Streams protocol to one server, under {Base}/v1/stream/.
type Client struct {
	Base string // e.g. http://127.0.0.1:4437
	HTTP *http.Client
}

// StatusError is an unexpected HTTP status.
type StatusError struct {
	Op     string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: unexpected status %d: %s", e.Op, e.Status, e.Body)
}

// streamPath is the path under which every benchmark server serves its streams.
const streamPath = "/v1/stream/"

// StreamURL is the URL of the stream called name.
func (c *Client) StreamURL(name string) string {
	return c.Base + streamPath + name
}

// visibleWait bounds how long Create waits for a new stream to answer HEAD.
const visibleWait = 5 * time.Second

// Create creates a JSON stream called name (201, or 200 when it already exists identically) and
// waits until HEAD finds it. The wait is for the reference server: under load it has answered
// 404 to appends right after a 201 (its metadata write may not be visible yet), and a benchmark
// must not count that against the measurement that follows.
func (c *Client) Create(ctx context.Context, name string) error {
	if err := c.create(ctx, name); err != nil {
		return err
	}
	deadline := time.Now().Add(visibleWait)
	for {
		ok, err := c.exists(ctx, name)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create %s: still not found %s after 201", name, visibleWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Client) exists(ctx context.Context, name string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.StreamURL(name), nil)
	if err != nil {
		return false, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, fmt.Errorf("head %s: %w", name, err)
	}
	drain(resp)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, &StatusError{Op: "head " + name, Status: resp.StatusCode}
}

func (c *Client) create(ctx context.Context, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.StreamURL(name), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", jsonType)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return statusError("create "+name, resp)
	}
	return nil
}

// Append posts body to the stream called name as a plain append and returns Stream-Next-Offset.
func (c *Client) Append(ctx context.Context, name string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.StreamURL(name), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", jsonType)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("append %s: %w", name, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return "", statusError("append "+name, resp)
	}
	return resp.Header.Get(hdrNextOffset), nil
}

// ProducerReply is the outcome of an idempotent-producer append
// (docs/server.md#idempotent-producers).
type ProducerReply struct {
	Status      int   // 200 accepted, 204 duplicate, 409 gap, ...
	ExpectedSeq int64 // Producer-Expected-Seq on a 409 gap, else -1
}

// ProducerAppend posts body under producer (id, epoch, seq). A status the protocol defines for
// producers (200, 204, 409) comes back in the reply; anything else is an error.
func (c *Client) ProducerAppend(ctx context.Context, name, id string, epoch, seq int64, body []byte) (ProducerReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.StreamURL(name), bytes.NewReader(body))
	if err != nil {
		return ProducerReply{}, err
	}
	req.Header.Set("Content-Type", jsonType)
	req.Header.Set(hdrProducerID, id)
	req.Header.Set(hdrProducerEpoch, strconv.FormatInt(epoch, 10))
	req.Header.Set(hdrProducerSeq, strconv.FormatInt(seq, 10))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return ProducerReply{}, fmt.Errorf("producer append %s: %w", name, err)
	}
	defer drain(resp)
	r := ProducerReply{Status: resp.StatusCode, ExpectedSeq: -1}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
	case http.StatusConflict:
		if v := resp.Header.Get(hdrExpectedSeq); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				r.ExpectedSeq = n
			}
		}
	default:
		return r, statusError("producer append "+name, resp)
	}
	return r, nil
}

// CatchUpResult summarises one full catch-up read.
type CatchUpResult struct {
	Requests   int
	Bytes      int64
	Messages   int
	NextOffset string
}

// CatchUp reads the stream called name from the start to its tail, following Stream-Next-Offset
// from response to response until one carries Stream-Up-To-Date: true (docs/server.md#catch-up-reads). A server may cap
// the size of each response; the reference never does.
func (c *Client) CatchUp(ctx context.Context, name string) (CatchUpResult, error) {
	var res CatchUpResult
	offset := "-1"
	buf := new(bytes.Buffer)
	for res.Requests < maxCatchUpRequests {
		u := c.StreamURL(name) + "?offset=" + url.QueryEscape(offset)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return res, err
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return res, fmt.Errorf("catch-up %s at %s: %w", name, offset, err)
		}
		res.Requests++
		if resp.StatusCode != http.StatusOK {
			err := statusError("catch-up "+name, resp)
			drain(resp)
			return res, err
		}
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil {
			return res, fmt.Errorf("catch-up %s at %s: read body: %w", name, offset, err)
		}
		res.Bytes += int64(buf.Len())
		res.Messages += CountMessages(buf.Bytes())
		next := resp.Header.Get(hdrNextOffset)
		if next == "" {
			return res, fmt.Errorf("catch-up %s at %s: response without %s", name, offset, hdrNextOffset)
		}
		res.NextOffset = next
		if resp.Header.Get(hdrUpToDate) == "true" {
			return res, nil
		}
		if next == offset {
			return res, fmt.Errorf("catch-up %s: no progress at %s without %s", name, offset, hdrUpToDate)
		}
		offset = next
	}
	return res, fmt.Errorf("catch-up %s: not up to date after %d requests", name, res.Requests)
}

// SSEEvent is one server-sent event: its type ("data" or "control") and its data lines joined
// with "\n" (docs/server.md#sse).
type SSEEvent struct {
	Type string
	Data []byte
}

// SSEReader reads events from a live=sse response.
type SSEReader struct {
	resp *http.Response
	r    *bufio.Reader
}

// OpenSSE opens a live=sse read of the stream called name at offset ("now" for the tail).
func (c *Client) OpenSSE(ctx context.Context, name, offset string) (*SSEReader, error) {
	u := c.StreamURL(name) + "?offset=" + url.QueryEscape(offset) + "&live=sse"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sse %s: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := statusError("sse "+name, resp)
		drain(resp)
		return nil, err
	}
	return NewSSEReader(resp), nil
}

// NewSSEReader reads events from resp's body; Close closes it.
func NewSSEReader(resp *http.Response) *SSEReader {
	return &SSEReader{resp: resp, r: bufio.NewReaderSize(resp.Body, 64<<10)}
}

// Next returns the next event. Comment lines and fields other than event and data are skipped.
func (s *SSEReader) Next() (SSEEvent, error) {
	var ev SSEEvent
	var data [][]byte
	seen := false
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A data line longer than the buffer: collect the rest of it.
			rest, err2 := s.r.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		if err != nil {
			if err == io.EOF && seen {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if !seen {
				continue
			}
			ev.Data = bytes.Join(data, []byte("\n"))
			if ev.Type == "" {
				ev.Type = "message"
			}
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Type = value
			seen = true
		case "data":
			data = append(data, []byte(value))
			seen = true
		}
	}
}

// Close ends the read.
func (s *SSEReader) Close() error { return s.resp.Body.Close() }

func statusError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &StatusError{Op: op, Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
}

// drain reads what is left of a response body and closes it, so the connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}
