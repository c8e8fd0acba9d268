package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream/internal/wire"
)

// Protocol header names (docs/server.md#streams lists where each is used), and the special
// offsets. They are the ones foldstream's server uses (package internal/wire).
const (
	HeaderStreamNextOffset    = wire.HeaderStreamNextOffset
	HeaderStreamUpToDate      = wire.HeaderStreamUpToDate
	HeaderStreamCursor        = wire.HeaderStreamCursor
	HeaderStreamClosed        = wire.HeaderStreamClosed
	HeaderStreamSeq           = wire.HeaderStreamSeq
	HeaderStreamTTL           = wire.HeaderStreamTTL
	HeaderStreamExpiresAt     = wire.HeaderStreamExpiresAt
	HeaderSSEDataEncoding     = wire.HeaderSSEDataEncoding
	HeaderProducerID          = wire.HeaderProducerID
	HeaderProducerEpoch       = wire.HeaderProducerEpoch
	HeaderProducerSeq         = wire.HeaderProducerSeq
	HeaderProducerExpectedSeq = wire.HeaderProducerExpectedSeq
	HeaderProducerReceivedSeq = wire.HeaderProducerReceivedSeq
	HeaderErrorCode           = wire.HeaderErrorCode // a foldstream server's error code (see Code)
	HeaderRequestID           = wire.HeaderRequestID // a foldstream server's id of the request (see Error.RequestID)
	DefaultContentType        = "application/octet-stream"
	OffsetStart               = wire.OffsetStart
	OffsetNow                 = wire.OffsetNow
)

// maxErrorBody bounds the error body the client reads: a refusal listing 100 schema violations
// fits.
const maxErrorBody int64 = 64 << 10

// Config configures a Stream handle. The zero value is usable.
type Config struct {
	// HTTPClient sends every request. Defaults to a client whose transport keeps up to 64 idle
	// connections per host, so a pipelining producer does not churn connections.
	HTTPClient *http.Client
	// Header is added to every request (for example Authorization).
	Header http.Header
	// Retry bounds retries of idempotent requests and of producer batches.
	Retry RetryPolicy
	// Clock is the time source for backoffs and linger timers. Defaults to SystemClock.
	Clock Clock
	// Logger receives debug logs of retries and reconnects. Defaults to a discarding logger.
	Logger *slog.Logger
}

var (
	defaultHTTPOnce sync.Once
	defaultHTTP     *http.Client
)

// DefaultHTTPClient returns the shared client used when Config.HTTPClient is nil.
func DefaultHTTPClient() *http.Client {
	defaultHTTPOnce.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 64
		defaultHTTP = &http.Client{Transport: t}
	})
	return defaultHTTP
}

// Stream is a handle to one stream URL. It is safe for concurrent use. Creating a handle sends
// nothing; call Create, Head or any other method.
type Stream struct {
	url    string
	hc     *http.Client
	header http.Header
	retry  RetryPolicy
	clock  Clock
	log    *slog.Logger

	mu          sync.Mutex
	contentType string
}

// NewStream returns a handle for the stream at rawURL (for example
// "http://127.0.0.1:4437/v1/stream/orders").
func NewStream(rawURL string, opts Config) (*Stream, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Code: CodeInvalidArgument, Op: "new stream", URL: rawURL, Message: "stream URL must be an absolute http(s) URL", Err: err}
	}
	s := &Stream{url: rawURL, hc: opts.HTTPClient, header: opts.Header.Clone(), retry: opts.Retry.withDefaults(), clock: opts.Clock, log: opts.Logger}
	if s.hc == nil {
		s.hc = DefaultHTTPClient()
	}
	if s.clock == nil {
		s.clock = SystemClock
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// URL returns the stream's URL.
func (s *Stream) URL() string { return s.url }

// ContentType returns the stream's content type as last learned from Create, Head or a read, or
// "" when unknown.
func (s *Stream) ContentType() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contentType
}

// SetContentType records the stream's content type without asking the server (useful when the
// caller knows it and wants to skip a HEAD).
func (s *Stream) SetContentType(ct string) {
	s.mu.Lock()
	s.contentType = ct
	s.mu.Unlock()
}

func (s *Stream) learnContentType(ct string) {
	if ct == "" {
		return
	}
	s.mu.Lock()
	s.contentType = ct
	s.mu.Unlock()
}

// IsJSON reports whether a content type is a JSON stream's (media type application/json,
// parameters ignored).
func IsJSON(contentType string) bool { return mediaType(contentType) == "application/json" }

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt, _, _ = strings.Cut(ct, ";")
	}
	return strings.ToLower(strings.TrimSpace(mt))
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// CreateOptions describe a new stream (docs/server.md#streams, PUT).
type CreateOptions struct {
	// ContentType is fixed at creation. Defaults to application/octet-stream.
	ContentType string
	// TTL is a sliding idle time-to-live, sent in whole seconds; zero means none. Exclusive with
	// ExpiresAt.
	TTL time.Duration
	// ExpiresAt is an absolute expiry; zero means none.
	ExpiresAt time.Time
	// Closed creates the stream already closed; Data is then its whole content.
	Closed bool
	// Data is optional initial content (for JSON streams a JSON value or array of values).
	Data []byte
	// ForkOf makes the new stream a fork of another stream on the same server
	// (docs/server.md#streams): its URL or path. The fork inherits the source's data before ForkOffset, then lives on its own.
	ForkOf string
	// ForkOffset is where the fork diverges (data strictly before it is inherited). Defaults to
	// the source's tail.
	ForkOffset string
	// ForkSubOffset moves the divergence point N bytes (JSON: N messages) into the record that
	// starts at ForkOffset. Zero means none.
	ForkSubOffset int64
	// Header holds extra request headers.
	Header http.Header
}

// Fork headers (docs/server.md#streams).
const (
	HeaderStreamForkedFrom    = "Stream-Forked-From"
	HeaderStreamForkOffset    = "Stream-Fork-Offset"
	HeaderStreamForkSubOffset = "Stream-Fork-Sub-Offset"
)

// Metadata is what the server says about a stream.
type Metadata struct {
	// Status is the HTTP status (201 created, 200 existing or HEAD).
	Status int
	// ContentType is the stream's content type.
	ContentType string
	// NextOffset is the tail.
	NextOffset string
	// TTL is the configured sliding TTL, zero when none.
	TTL time.Duration
	// ExpiresAt is the absolute expiry, zero when none.
	ExpiresAt time.Time
	// Closed reports that the stream is closed.
	Closed bool
	// Header is the raw response header.
	Header http.Header
}

func metadataFrom(resp *http.Response) Metadata {
	m := Metadata{
		Status:      resp.StatusCode,
		ContentType: resp.Header.Get("Content-Type"),
		NextOffset:  resp.Header.Get(HeaderStreamNextOffset),
		Closed:      isTrue(resp.Header.Get(HeaderStreamClosed)),
		Header:      resp.Header,
	}
	if v := resp.Header.Get(HeaderStreamTTL); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m.TTL = time.Duration(n) * time.Second
		}
	}
	if v := resp.Header.Get(HeaderStreamExpiresAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			m.ExpiresAt = t
		}
	}
	return m
}

// Create creates the stream, or confirms that an identical one exists (Status 200). A different
// existing configuration is ErrConflict.
func (s *Stream) Create(ctx context.Context, o CreateOptions) (Metadata, error) {
	ct := o.ContentType
	if ct == "" {
		ct = DefaultContentType
	}
	if o.TTL > 0 && !o.ExpiresAt.IsZero() {
		return Metadata{}, &Error{Code: CodeInvalidArgument, Op: "create", URL: s.url, Message: "TTL and ExpiresAt are exclusive"}
	}
	h := http.Header{}
	for k, vs := range o.Header {
		h[k] = vs
	}
	if o.ContentType != "" || o.ForkOf == "" {
		h.Set("Content-Type", ct) // a fork without one inherits the source's
	}
	if o.ForkOf != "" {
		src := o.ForkOf
		if u, err := url.Parse(o.ForkOf); err == nil && u.Path != "" {
			src = u.EscapedPath()
		}
		h.Set(HeaderStreamForkedFrom, src)
		if o.ForkOffset != "" {
			h.Set(HeaderStreamForkOffset, o.ForkOffset)
		}
		if o.ForkSubOffset > 0 {
			h.Set(HeaderStreamForkSubOffset, strconv.FormatInt(o.ForkSubOffset, 10))
		}
	}
	if o.TTL > 0 {
		h.Set(HeaderStreamTTL, strconv.FormatInt(int64((o.TTL+time.Second-1)/time.Second), 10))
	}
	if !o.ExpiresAt.IsZero() {
		h.Set(HeaderStreamExpiresAt, o.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if o.Closed {
		h.Set(HeaderStreamClosed, "true")
	}
	// PUT is idempotent by configuration (an identical re-create answers 200), so it may be
	// retried.
	resp, body, err := s.do(ctx, "create", http.MethodPut, s.url, h, o.Data, retryAll)
	if err != nil {
		return Metadata{}, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return Metadata{}, statusError("create", s.url, resp, body)
	}
	m := metadataFrom(resp)
	if m.ContentType == "" {
		m.ContentType = ct
	}
	s.learnContentType(m.ContentType)
	return m, nil
}

// Head returns the stream's metadata and records its content type.
func (s *Stream) Head(ctx context.Context) (Metadata, error) {
	resp, body, err := s.do(ctx, "head", http.MethodHead, s.url, nil, nil, retryAll)
	if err != nil {
		return Metadata{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Metadata{}, statusError("head", s.url, resp, body)
	}
	m := metadataFrom(resp)
	s.learnContentType(m.ContentType)
	return m, nil
}

// Delete deletes the stream. It is not retried: a retry after a lost response would report
// ErrStreamNotFound for a delete that succeeded.
func (s *Stream) Delete(ctx context.Context) error {
	resp, body, err := s.do(ctx, "delete", http.MethodDelete, s.url, nil, nil, retryNone)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return statusError("delete", s.url, resp, body)
	}
	return nil
}

// AppendOption adjusts one append.
type AppendOption func(*appendConfig)

type appendConfig struct {
	seq         string
	contentType string
	header      http.Header
}

// WithSeq sends Stream-Seq: the server refuses (ErrConflict) a value that is not byte-wise greater
// than the previous one, which makes a retried append detectable.
func WithSeq(seq string) AppendOption { return func(c *appendConfig) { c.seq = seq } }

// WithContentType overrides the Content-Type of one append (by default the stream's).
func WithContentType(ct string) AppendOption { return func(c *appendConfig) { c.contentType = ct } }

// WithHeader adds a request header to one append.
func WithHeader(name, value string) AppendOption {
	return func(c *appendConfig) {
		if c.header == nil {
			c.header = http.Header{}
		}
		c.header.Add(name, value)
	}
}

// AppendResult is the outcome of an append or close.
type AppendResult struct {
	// Status is the HTTP status (204 plain append, 200 producer append).
	Status int
	// NextOffset is the stream's tail after the write.
	NextOffset string
	// Closed reports that the stream is now closed.
	Closed bool
	// Header is the raw response header.
	Header http.Header
}

// Append appends data as one record. For JSON streams data must be a JSON value; a top-level array
// is flattened one level by the server (use AppendJSON to append one Go value). An append is
// retried only when the server answers 429 or 5xx (it refused the request); a network error is
// returned at once, because the append may have been applied and a retry could duplicate it. Use
// an IdempotentProducer for exactly-once retries of every failure. A closed stream returns
// *StreamClosedError.
func (s *Stream) Append(ctx context.Context, data []byte, opts ...AppendOption) (AppendResult, error) {
	if len(data) == 0 {
		return AppendResult{}, &Error{Code: CodeInvalidArgument, Op: "append", URL: s.url, Message: "append needs a non-empty body; use Close to close without data"}
	}
	return s.post(ctx, "append", data, false, opts)
}

// AppendJSON marshals v and appends it as one message of a JSON stream (it wraps the value in an
// array, so a Go slice is stored as one message).
func (s *Stream) AppendJSON(ctx context.Context, v any, opts ...AppendOption) (AppendResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return AppendResult{}, &Error{Code: CodeInvalidArgument, Op: "append", URL: s.url, Message: "value cannot be marshalled", Err: err}
	}
	body := make([]byte, 0, len(b)+2)
	body = append(append(append(body, '['), b...), ']')
	if s.ContentType() == "" {
		opts = append([]AppendOption{WithContentType("application/json")}, opts...)
	}
	return s.Append(ctx, body, opts...)
}

// Close closes the stream, appending final (when non-empty) atomically with the closure. Closing an
// already-closed stream without data succeeds; with data it returns *StreamClosedError.
func (s *Stream) Close(ctx context.Context, final []byte, opts ...AppendOption) (AppendResult, error) {
	return s.post(ctx, "close", final, true, opts)
}

func (s *Stream) post(ctx context.Context, op string, data []byte, closeStream bool, opts []AppendOption) (AppendResult, error) {
	var c appendConfig
	for _, o := range opts {
		o(&c)
	}
	h := http.Header{}
	for k, vs := range c.header {
		h[k] = vs
	}
	if len(data) > 0 {
		ct := c.contentType
		if ct == "" {
			ct = s.ContentType()
		}
		if ct == "" {
			ct = DefaultContentType
		}
		h.Set("Content-Type", ct)
	}
	if c.seq != "" {
		h.Set(HeaderStreamSeq, c.seq)
	}
	if closeStream {
		h.Set(HeaderStreamClosed, "true")
	}
	resp, body, err := s.do(ctx, op, http.MethodPost, s.url, h, data, retryStatus)
	if err != nil {
		return AppendResult{}, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return AppendResult{}, statusError(op, s.url, resp, body)
	}
	return AppendResult{
		Status:     resp.StatusCode,
		NextOffset: resp.Header.Get(HeaderStreamNextOffset),
		Closed:     isTrue(resp.Header.Get(HeaderStreamClosed)),
		Header:     resp.Header,
	}, nil
}

// retryMode says which failures a request may retry.
type retryMode int

const (
	retryNone   retryMode = iota // never (DELETE: a retry after a lost response reports 404)
	retryStatus                  // 429 and 5xx answers only: the server refused the request
	retryAll                     // also network errors: the request is idempotent
)

// do sends one request whose response body is small (everything but reads) and returns the
// response with its body read (bounded). Retries follow mode and the policy, honouring
// Retry-After.
func (s *Stream) do(ctx context.Context, op, method, u string, h http.Header, body []byte, mode retryMode) (*http.Response, []byte, error) {
	attempts := 1
	if mode != retryNone {
		attempts = s.retry.MaxAttempts
	}
	for attempt := 1; ; attempt++ {
		resp, err := s.send(ctx, method, u, h, body)
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			// Drain a little more so the connection can be reused, then close.
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
			if rerr != nil {
				err = rerr
			} else if attempt < attempts && retryableStatus(resp.StatusCode) && !outcomeUnknown(resp, mode) {
				d := s.retry.delay(attempt, parseRetryAfter(resp.Header.Get("Retry-After"), s.clock.Now()))
				s.log.DebugContext(ctx, "retrying", "op", op, "status", resp.StatusCode, "attempt", attempt, "delay", d)
				s.retry.report(op, attempt, d, resp.StatusCode, nil)
				if err := sleep(ctx, s.clock, d); err != nil {
					return nil, nil, err
				}
				continue
			} else {
				return resp, b, nil
			}
		}
		if isCtxErr(err) && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if attempt >= attempts || mode != retryAll {
			return nil, nil, &Error{Code: CodeNetwork, Op: op, URL: u, Err: err}
		}
		d := s.retry.delay(attempt, 0)
		s.log.DebugContext(ctx, "retrying", "op", op, "err", err, "attempt", attempt, "delay", d)
		s.retry.report(op, attempt, d, 0, err)
		if err := sleep(ctx, s.clock, d); err != nil {
			return nil, nil, err
		}
	}
}

// outcomeUnknown reports an answer that a request of mode retryStatus (a plain append or close,
// which the server cannot tell from a new one) must not resend: the server's COMMIT of it was not
// confirmed, so it may be written already and a resend could write it twice. The caller gets
// COMMIT_OUTCOME_UNKNOWN and decides; an IdempotentProducer resends and the server settles it.
func outcomeUnknown(resp *http.Response, mode retryMode) bool {
	return mode == retryStatus && resp.Header.Get(HeaderErrorCode) == string(CodeCommitOutcomeUnknown)
}

func (s *Stream) send(ctx context.Context, method, u string, h http.Header, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	for k, vs := range s.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	return s.hc.Do(req)
}

// urlWith returns the stream URL with the given query parameters set, sorted by key so that
// caches see stable keys (docs/server.md#caching-and-the-cursor).
func (s *Stream) urlWith(params map[string]string) string {
	u, err := url.Parse(s.url)
	if err != nil {
		return s.url
	}
	q := u.Query()
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode() // Encode sorts by key.
	return u.String()
}

// String names the stream for logs.
func (s *Stream) String() string { return fmt.Sprintf("Stream(%s)", RedactURL(s.url)) }
