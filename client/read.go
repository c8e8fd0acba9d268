package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/foldstream/foldstream/internal/wire"
)

// LiveMode selects how a read continues once it has caught up.
type LiveMode string

// Live modes.
const (
	// LiveNone reads what exists and stops at the tail (catch-up).
	LiveNone LiveMode = ""
	// LiveLongPoll catches up, then long-polls for new data until the stream closes or ctx ends.
	LiveLongPoll LiveMode = wire.LiveLongPoll
	// LiveSSE reads over server-sent events from the start, reconnecting from the last offset when
	// the server ends the connection, until the stream closes or ctx ends.
	LiveSSE LiveMode = wire.LiveSSE
	// LiveAuto catches up, then continues with SSE for text and JSON streams and long-poll for
	// others.
	LiveAuto LiveMode = "auto"
)

// ReadOptions select where and how to read.
type ReadOptions struct {
	// Offset to start from: an offset from an earlier read, OffsetStart ("-1", the default) or
	// OffsetNow ("now", the tail).
	Offset string
	// Live selects catch-up only (the default) or a live mode.
	Live LiveMode
	// Cursor is a Stream-Cursor from an earlier read, echoed to the server
	// (docs/server.md#caching-and-the-cursor).
	Cursor string
	// Header holds extra request headers.
	Header http.Header
}

// Chunk is one piece of a read: the bytes of one response (catch-up, long-poll) or one data event
// and its control event (SSE), with the position after it.
type Chunk struct {
	// Data holds the bytes read; for JSON streams a JSON array of messages.
	Data []byte
	// Offset is where this chunk starts.
	Offset string
	// NextOffset is where the next read starts; resume from it.
	NextOffset string
	// Cursor is the server's cursor, echoed on the next request.
	Cursor string
	// UpToDate reports that the chunk reaches the stream's current tail.
	UpToDate bool
	// Closed reports that the stream is closed and this chunk reaches its final offset: the read
	// ends after it.
	Closed bool
	// ContentType is the stream's content type.
	ContentType string
	// Status is the HTTP status of the response behind the chunk: 200 for data, 204 for a
	// long-poll that timed out or found the stream closed; 200 for SSE.
	Status int
	// Partial reports that more of the same response follows: a response larger than about
	// 1 MiB (a catch-up of a long stream can be one response) is handed on in parts, each a JSON
	// array of whole messages for JSON streams, so a read never holds more than a part. The
	// protocol gives offsets only at a response's end, so a partial chunk's NextOffset is the
	// response's start: resuming from it reads this chunk again, never skips anything.
	Partial bool
}

// Empty reports whether the chunk holds no data (no bytes, or an empty JSON array).
func (c Chunk) Empty() bool {
	d := bytes.TrimSpace(c.Data)
	return len(d) == 0 || (IsJSON(c.ContentType) && bytes.Equal(d, []byte("[]")))
}

// Read returns an iterator over the stream's chunks from o.Offset. It yields a chunk whenever data
// arrives, plus an empty chunk the first time the read reaches the tail and when the stream turns
// out to be closed. Catch-up reads end at the tail; live reads end when the stream is closed or an
// error is yielded. When ctx ends first, the last pair is (Chunk{}, ctx.Err()): a read cut by its
// context never looks complete (test with errors.Is(err, context.Canceled) or
// context.DeadlineExceeded). 429, 5xx and network errors are retried with backoff per the Stream's
// RetryPolicy; SSE reconnects from the last offset and never after streamClosed.
func (s *Stream) Read(ctx context.Context, o ReadOptions) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) {
		r := &reader{s: s, offset: o.Offset, cursor: o.Cursor, header: o.Header}
		if r.offset == "" {
			r.offset = OffsetStart
		}
		stopped, failed := false, false
		r.run(ctx, o.Live, func(c Chunk, err error) bool {
			failed = failed || err != nil
			if !yield(c, err) {
				stopped = true
				return false
			}
			return true
		})
		// Ended by ctx rather than by the caller, an error, the stream's close or (catch-up) the tail.
		complete := r.closed || (o.Live == LiveNone && r.upToDate)
		if err := ctx.Err(); err != nil && !stopped && !failed && !complete {
			yield(Chunk{}, err)
		}
	}
}

// Messages returns an iterator over the messages of a JSON stream, each as raw JSON.
func (s *Stream) Messages(ctx context.Context, o ReadOptions) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for c, err := range s.Read(ctx, o) {
			if err != nil {
				yield(nil, err)
				return
			}
			msgs, err := SplitJSON(c.Data)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, m := range msgs {
				if !yield(m, nil) {
					return
				}
			}
		}
	}
}

// ReadJSON returns an iterator over the messages of a JSON stream decoded into T.
func ReadJSON[T any](ctx context.Context, s *Stream, o ReadOptions) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for m, err := range s.Messages(ctx, o) {
			var v T
			if err == nil {
				if uerr := json.Unmarshal(m, &v); uerr != nil {
					err = &Error{Code: CodeParse, Op: "read", URL: s.url, Message: "message does not decode", Err: uerr}
				}
			}
			if err != nil {
				yield(v, err)
				return
			}
			if !yield(v, nil) {
				return
			}
		}
	}
}

// SplitJSON splits a JSON stream's chunk (a JSON array) into its messages. Empty data is no
// messages.
func SplitJSON(data []byte) ([]json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(data, &msgs); err != nil {
		return nil, &Error{Code: CodeParse, Op: "read", Message: "JSON chunk is not an array", Err: err}
	}
	return msgs, nil
}

// reader holds a read's position across requests and reconnects.
type reader struct {
	s        *Stream
	offset   string
	cursor   string
	header   http.Header
	upToDate bool // the last chunk reached the tail
	closed   bool
}

func (r *reader) run(ctx context.Context, live LiveMode, yield func(Chunk, error) bool) {
	if live == LiveSSE {
		r.sse(ctx, yield)
		return
	}
	// A long-poll from "now" starts waiting at once: catching up at the tail would only return an
	// empty response.
	if live == LiveLongPoll && r.offset == OffsetNow {
		r.poll(ctx, LiveLongPoll, yield)
		return
	}
	// Catch up first (every mode but SSE), then continue in the live mode.
	ok := r.poll(ctx, LiveNone, yield)
	if !ok || r.closed || live == LiveNone {
		return
	}
	switch live {
	case LiveLongPoll:
		r.poll(ctx, LiveLongPoll, yield)
	case LiveAuto:
		ct := mediaType(r.s.ContentType())
		if strings.HasPrefix(ct, "text/") || ct == "application/json" {
			r.sse(ctx, yield)
		} else {
			r.poll(ctx, LiveLongPoll, yield)
		}
	default:
		yield(Chunk{}, &Error{Code: CodeInvalidArgument, Op: "read", URL: r.s.url, Message: "unknown live mode " + string(live)})
	}
}

// emit yields a chunk if it carries news: data, closure, or the first arrival at the tail.
func (r *reader) emit(c Chunk, yield func(Chunk, error) bool) bool {
	news := !c.Empty() || c.Closed || (c.UpToDate && !r.upToDate)
	r.upToDate = c.UpToDate
	if !news {
		return true
	}
	return yield(c, nil)
}

// fail yields err unless it is ctx's own cancellation.
func (r *reader) fail(ctx context.Context, err error, yield func(Chunk, error) bool) bool {
	if ctx.Err() != nil {
		return false
	}
	yield(Chunk{}, err)
	return false
}

// poll runs catch-up (LiveNone: until up to date) or long-poll (until closed) requests. It returns
// false when the iteration must stop.
func (r *reader) poll(ctx context.Context, live LiveMode, yield func(Chunk, error) bool) bool {
	failures := 0
	for {
		params := map[string]string{wire.QueryOffset: r.offset, wire.QueryCursor: r.cursor}
		if live == LiveLongPoll {
			params[wire.QueryLive] = string(live)
		}
		u := r.s.urlWith(params)
		resp, err := r.s.send(ctx, http.MethodGet, u, r.header, nil)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			failures++
			if failures >= r.s.retry.MaxAttempts {
				return r.fail(ctx, &Error{Code: CodeNetwork, Op: "read", URL: u, Err: err}, yield)
			}
			if r.backoff(ctx, failures, 0, 0, err) != nil {
				return false
			}
			continue
		}
		switch resp.StatusCode {
		case http.StatusOK:
			body, parted, stop, err := r.readParts(ctx, u, resp, yield)
			resp.Body.Close()
			if stop {
				return false
			}
			if err != nil && parted {
				// Part of the response was handed on: a resend would repeat it.
				return r.fail(ctx, &Error{Code: CodeNetwork, Op: "read", URL: u, Err: err,
					Message: "the response was cut after part of it was read; resume from the last chunk's NextOffset"}, yield)
			}
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				failures++
				if failures >= r.s.retry.MaxAttempts {
					return r.fail(ctx, &Error{Code: CodeNetwork, Op: "read", URL: u, Err: err}, yield)
				}
				if r.backoff(ctx, failures, 0, 0, err) != nil {
					return false
				}
				continue
			}
			failures = 0
			c := r.chunkFrom(resp, body)
			if IsJSON(c.ContentType) && !validJSONArray(body) {
				return r.fail(ctx, &Error{Code: CodeParse, Op: "read", URL: u, Status: resp.StatusCode, Message: "a JSON stream's response is not a JSON array"}, yield)
			}
			if !r.emit(c, yield) {
				return false
			}
			if c.Closed || (live == LiveNone && c.UpToDate) {
				return true
			}
		case http.StatusNoContent, http.StatusNotModified:
			resp.Body.Close()
			failures = 0
			c := r.chunkFrom(resp, nil)
			if !r.emit(c, yield) {
				return false
			}
			if c.Closed || live == LiveNone {
				return true
			}
		default:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			if retryableStatus(resp.StatusCode) {
				failures++
				if failures < r.s.retry.MaxAttempts {
					d := r.s.retry.delay(failures, parseRetryAfter(resp.Header.Get("Retry-After"), r.s.clock.Now()))
					r.s.log.DebugContext(ctx, "read retry", "status", resp.StatusCode, "delay", d)
					r.s.retry.report("read", failures, d, resp.StatusCode, nil)
					if sleep(ctx, r.s.clock, d) != nil {
						return false
					}
					continue
				}
			}
			return r.fail(ctx, statusError("read", u, resp, body), yield)
		}
	}
}

// readParts reads a 200 response's body, yielding every part but the last as a Partial chunk
// (parts.go), and returns the last part. parted reports that a part was yielded; stop that the
// iteration must end (the consumer stopped, or an error was yielded).
func (r *reader) readParts(ctx context.Context, u string, resp *http.Response, yield func(Chunk, error) bool) (last []byte, parted, stop bool, err error) {
	ct := resp.Header.Get("Content-Type")
	if ct != "" {
		r.s.learnContentType(ct)
	}
	isJSON := IsJSON(r.s.ContentType())
	start := r.offset
	badPart := false
	last, err = splitBody(resp.Body, isJSON, func(p []byte) bool {
		if isJSON && !validJSONArray(p) {
			badPart = true
			return false
		}
		parted = true
		c := Chunk{Data: p, Offset: start, NextOffset: start, Cursor: r.cursor, ContentType: r.s.ContentType(),
			Status: resp.StatusCode, Partial: true}
		if !yield(c, nil) {
			stop = true
			return false
		}
		return true
	})
	if stop {
		return nil, parted, true, nil
	}
	if badPart || errors.Is(err, errNotArray) {
		r.fail(ctx, &Error{Code: CodeParse, Op: "read", URL: u, Status: resp.StatusCode, Message: "a JSON stream's response is not a JSON array"}, yield)
		return nil, parted, true, nil
	}
	return last, parted, false, err
}

// chunkFrom builds a chunk from a catch-up or long-poll response and advances the position.
func (r *reader) chunkFrom(resp *http.Response, body []byte) Chunk {
	ct := resp.Header.Get("Content-Type")
	if ct != "" && resp.StatusCode == http.StatusOK {
		r.s.learnContentType(ct)
	}
	c := Chunk{
		Data:        body,
		Offset:      r.offset,
		NextOffset:  resp.Header.Get(HeaderStreamNextOffset),
		Cursor:      resp.Header.Get(HeaderStreamCursor),
		Closed:      isTrue(resp.Header.Get(HeaderStreamClosed)),
		ContentType: r.s.ContentType(),
		Status:      resp.StatusCode,
	}
	c.UpToDate = c.Closed || isTrue(resp.Header.Get(HeaderStreamUpToDate)) || resp.StatusCode == http.StatusNoContent
	if c.NextOffset != "" {
		r.offset = c.NextOffset
	} else {
		c.NextOffset = r.offset
	}
	if c.Cursor != "" {
		r.cursor = c.Cursor
	}
	r.closed = c.Closed
	return c
}

// validJSONArray reports whether b is one JSON array (empty bodies count as an empty array).
func validJSONArray(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) == 0 || (t[0] == '[' && json.Valid(t))
}

// controlEvent is the JSON of an SSE control event (docs/server.md#sse).
type controlEvent struct {
	StreamNextOffset string `json:"streamNextOffset"`
	StreamCursor     string `json:"streamCursor"`
	UpToDate         bool   `json:"upToDate"`
	StreamClosed     bool   `json:"streamClosed"`
}

// sse reads over server-sent events, reconnecting from the last offset until the stream closes.
func (r *reader) sse(ctx context.Context, yield func(Chunk, error) bool) bool {
	failures := 0
	for {
		u := r.s.urlWith(map[string]string{wire.QueryOffset: r.offset, wire.QueryCursor: r.cursor, wire.QueryLive: string(LiveSSE)})
		h := http.Header{"Accept": {"text/event-stream"}}
		for k, vs := range r.header {
			h[k] = vs
		}
		resp, err := r.s.send(ctx, http.MethodGet, u, h, nil)
		if err == nil && resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			if !retryableStatus(resp.StatusCode) {
				return r.fail(ctx, statusError("read", u, resp, body), yield)
			}
			failures++
			if failures >= r.s.retry.MaxAttempts {
				return r.fail(ctx, statusError("read", u, resp, body), yield)
			}
			if r.backoff(ctx, failures, parseRetryAfter(resp.Header.Get("Retry-After"), r.s.clock.Now()), resp.StatusCode, nil) != nil {
				return false
			}
			continue
		}
		var progressed bool
		if err == nil {
			var stop bool
			progressed, stop, err = r.sseStream(ctx, resp, yield)
			resp.Body.Close()
			if stop {
				return false
			}
		}
		if ctx.Err() != nil {
			return false
		}
		if progressed {
			failures = 0
			continue // the server ended the connection: reconnect at once from the last offset
		}
		failures++
		if failures >= r.s.retry.MaxAttempts {
			if err == nil {
				err = errors.New("server ended the SSE connection without events")
			}
			return r.fail(ctx, &Error{Code: CodeNetwork, Op: "read", URL: u, Err: err}, yield)
		}
		r.s.log.DebugContext(ctx, "sse reconnect", "offset", r.offset, "err", err, "attempt", failures)
		if r.backoff(ctx, failures, 0, 0, err) != nil {
			return false
		}
	}
}

// sseStream consumes one SSE connection. It reports whether any control event arrived, whether the
// iteration must stop (closed, consumer stopped, or a fatal error already yielded), and the
// connection's error.
func (r *reader) sseStream(ctx context.Context, resp *http.Response, yield func(Chunk, error) bool) (progressed, stop bool, err error) {
	base64Data := strings.EqualFold(resp.Header.Get(HeaderSSEDataEncoding), "base64")
	p := newSSEParser(resp.Body)
	var pending []byte
	var havePending bool
	for {
		ev, err := p.next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return progressed, false, err
		}
		switch ev.Type {
		case "data":
			d := ev.Data
			if base64Data {
				d, err = decodeBase64Lines(d)
				if err != nil {
					yield(Chunk{}, &Error{Code: CodeParse, Op: "read", URL: r.s.url, Message: "bad base64 in SSE data event", Err: err})
					return progressed, true, nil
				}
			}
			if IsJSON(r.s.ContentType()) && !validJSONArray(d) {
				yield(Chunk{}, &Error{Code: CodeParse, Op: "read", URL: r.s.url, Message: "a JSON stream's SSE data event is not a JSON array"})
				return progressed, true, nil
			}
			pending = joinData(pending, d, IsJSON(r.s.ContentType()), havePending)
			havePending = true
		case "control":
			var ce controlEvent
			if err := json.Unmarshal(ev.Data, &ce); err != nil {
				yield(Chunk{}, &Error{Code: CodeParse, Op: "read", URL: r.s.url, Message: "bad SSE control event", Err: err})
				return progressed, true, nil
			}
			progressed = true
			c := Chunk{Data: pending, Offset: r.offset, NextOffset: ce.StreamNextOffset, Cursor: ce.StreamCursor,
				UpToDate: ce.UpToDate || ce.StreamClosed, Closed: ce.StreamClosed, ContentType: r.s.ContentType(), Status: http.StatusOK}
			if c.NextOffset != "" {
				r.offset = c.NextOffset
			} else {
				c.NextOffset = r.offset
			}
			if c.Cursor != "" {
				r.cursor = c.Cursor
			}
			r.closed = c.Closed
			pending, havePending = nil, false
			if !r.emit(c, yield) {
				return progressed, true, nil
			}
			if c.Closed {
				return progressed, true, nil
			}
		}
	}
}

// joinData concatenates consecutive data events that precede one control event (older servers send
// several). JSON arrays are merged into one array so the chunk stays a single JSON array.
func joinData(pending, d []byte, isJSON, havePending bool) []byte {
	if !havePending {
		return append([]byte(nil), d...)
	}
	if isJSON {
		a, b := bytes.TrimSpace(pending), bytes.TrimSpace(d)
		if len(a) >= 2 && len(b) >= 2 && a[0] == '[' && b[0] == '[' {
			inner := bytes.TrimSpace(b[1 : len(b)-1])
			if len(inner) == 0 {
				return a
			}
			head := a[:len(a)-1]
			if len(bytes.TrimSpace(a[1:len(a)-1])) > 0 {
				head = append(head, ',')
			}
			return append(append(head, inner...), ']')
		}
	}
	return append(pending, d...)
}

// decodeBase64Lines removes the line breaks of a multi-line base64 payload and decodes it.
func decodeBase64Lines(d []byte) ([]byte, error) {
	clean := make([]byte, 0, len(d))
	for _, b := range d {
		if b != '\n' && b != '\r' {
			clean = append(clean, b)
		}
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(out, clean)
	return out[:n], err
}

// backoff waits before a read's next attempt after failed attempt number failures, reporting it
// to RetryPolicy.OnRetry.
func (r *reader) backoff(ctx context.Context, failures int, retryAfter time.Duration, status int, err error) error {
	d := r.s.retry.delay(failures, retryAfter)
	r.s.retry.report("read", failures, d, status, err)
	return sleep(ctx, r.s.clock, d)
}
