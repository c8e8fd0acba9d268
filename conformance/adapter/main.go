// Command adapter drives foldstream's Go client from the upstream Durable Streams client
// conformance suite (test tooling, not part of foldstream's API). It reads one JSON command per
// line on stdin and writes exactly one JSON result per line on stdout, the suite's adapter
// protocol; the suite starts it with the adapter's path (`go build -o adapter ./conformance/adapter`). It also
// answers the suite's benchmark commands (benchmark.go). Features
// reported: batching, sse, longPoll, auto, streaming, dynamicHeaders. Not reported: retryOptions
// (the suite's explicit-zero rules differ from RetryPolicy, where zero selects the default),
// strictZeroValidation (likewise) and batchItems (the producer batches by bytes only).
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/client"
)

func main() {
	a := newAdapter()
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			res, stop := a.handle(line)
			b, _ := json.Marshal(res)
			out.Write(b)
			out.WriteByte('\n')
			out.Flush()
			if stop {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

type command struct {
	Type            string            `json:"type"`
	ServerURL       string            `json:"serverUrl"`
	TimeoutMs       *int              `json:"timeoutMs"`
	Path            string            `json:"path"`
	ContentType     string            `json:"contentType"`
	TTLSeconds      *int64            `json:"ttlSeconds"`
	ExpiresAt       string            `json:"expiresAt"`
	Headers         map[string]string `json:"headers"`
	Closed          bool              `json:"closed"`
	Data            *string           `json:"data"`
	Binary          bool              `json:"binary"`
	Seq             *int64            `json:"seq"`
	ProducerID      string            `json:"producerId"`
	ProducerEpoch   *int64            `json:"producerEpoch"`
	ProducerSeq     *int64            `json:"producerSeq"`
	Epoch           int64             `json:"epoch"`
	AutoClaim       bool              `json:"autoClaim"`
	Items           []string          `json:"items"`
	MaxInFlight     *int              `json:"maxInFlight"`
	Offset          string            `json:"offset"`
	Live            json.RawMessage   `json:"live"`
	MaxChunks       *int              `json:"maxChunks"`
	WaitForUpToDate bool              `json:"waitForUpToDate"`
	Name            string            `json:"name"`
	ValueType       string            `json:"valueType"`
	InitialValue    string            `json:"initialValue"`
	Target          *validateTarget   `json:"target"`
}

type validateTarget struct {
	Target        string  `json:"target"`
	ProducerID    *string `json:"producerId"`
	Epoch         *int64  `json:"epoch"`
	MaxBatchBytes *int    `json:"maxBatchBytes"`
}

type result map[string]any

type dynamic struct {
	kind    string
	counter int
	token   string
}

type adapter struct {
	server       string
	contentTypes map[string]string
	producers    map[string]*client.IdempotentProducer
	dynHeaders   map[string]*dynamic
	dynParams    map[string]*dynamic
	hc           *http.Client
}

func newAdapter() *adapter {
	return &adapter{
		contentTypes: map[string]string{}, producers: map[string]*client.IdempotentProducer{},
		dynHeaders: map[string]*dynamic{}, dynParams: map[string]*dynamic{}, hc: client.DefaultHTTPClient(),
	}
}

func (a *adapter) handle(line []byte) (res result, stop bool) {
	var c command
	if err := json.Unmarshal(line, &c); err != nil {
		return result{"type": "error", "success": false, "commandType": "unknown", "errorCode": "PARSE_ERROR", "message": err.Error()}, false
	}
	defer func() {
		if r := recover(); r != nil {
			res = errResult(c.Type, &client.Error{Code: "INTERNAL_ERROR", Message: fmt.Sprint(r)})
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if c.Type == "benchmark" {
		return a.benchmark(line), false
	}
	return a.do(ctx, c), c.Type == "shutdown"
}

func (a *adapter) do(ctx context.Context, c command) result {
	switch c.Type {
	case "init":
		a.server = c.ServerURL
		clear(a.contentTypes)
		clear(a.producers)
		clear(a.dynHeaders)
		clear(a.dynParams)
		return result{"type": "init", "success": true, "clientName": "foldstream-go", "clientVersion": "0.1.0",
			"features": map[string]bool{"batching": true, "sse": true, "longPoll": true, "auto": true, "streaming": true, "dynamicHeaders": true}}
	case "shutdown":
		return result{"type": "shutdown", "success": true}
	case "create":
		return a.create(ctx, c)
	case "connect", "head":
		return a.head(ctx, c)
	case "append":
		return a.append(ctx, c)
	case "read":
		return a.read(c)
	case "delete":
		s, _, _ := a.stream(c.Path, c.Headers, false)
		if err := s.Delete(ctx); err != nil {
			return errResult(c.Type, err)
		}
		delete(a.contentTypes, c.Path)
		return result{"type": "delete", "success": true, "status": 200}
	case "close", "server-close":
		s, _, _ := a.stream(c.Path, nil, false)
		var opts []client.AppendOption
		if c.ContentType != "" {
			opts = append(opts, client.WithContentType(c.ContentType))
		}
		r, err := s.Close(ctx, dataBytes(c.Data, false), opts...)
		if err != nil {
			return errResult(c.Type, err)
		}
		return result{"type": c.Type, "success": true, "finalOffset": r.NextOffset}
	case "idempotent-append":
		p, err := a.producer(c, 1, -1, 0)
		if err != nil {
			return errResult(c.Type, err)
		}
		if err := p.Append(dataBytes(c.Data, false)); err != nil {
			return errResult(c.Type, err)
		}
		if err := p.Flush(ctx); err != nil {
			return errResult(c.Type, err)
		}
		return result{"type": c.Type, "success": true, "status": 200, "offset": p.LastOffset()}
	case "idempotent-append-batch":
		inFlight := 1
		if c.MaxInFlight != nil && *c.MaxInFlight > 0 {
			inFlight = *c.MaxInFlight
		}
		linger, batchBytes := time.Second, 0
		if inFlight > 1 { // one item per batch, to exercise out-of-order 409s
			linger, batchBytes = -1, 1
		}
		s, _, _ := a.stream(c.Path, c.Headers, false)
		// The suite names its epochs (0 included): use them as given (Resume).
		p, err := client.NewIdempotentProducer(s, c.ProducerID, client.ProducerConfig{Epoch: c.Epoch, Resume: true, AutoClaim: c.AutoClaim, MaxInFlight: inFlight, Linger: linger, MaxBatchBytes: batchBytes})
		if err != nil {
			return errResult(c.Type, err)
		}
		for _, it := range c.Items {
			if err := p.Append([]byte(it)); err != nil {
				p.Close(ctx)
				return errResult(c.Type, err)
			}
		}
		if err := p.Close(ctx); err != nil {
			return errResult(c.Type, err)
		}
		return result{"type": c.Type, "success": true, "status": 200, "producerSeq": p.NextSeq() - 1}
	case "idempotent-close":
		p, err := a.producer(c, 1, -1, 0)
		if err != nil {
			return errResult(c.Type, err)
		}
		r, err := p.CloseStream(ctx, dataBytes(c.Data, false))
		if err != nil {
			return errResult(c.Type, err)
		}
		return result{"type": c.Type, "success": true, "status": 200, "finalOffset": r.NextOffset}
	case "idempotent-detach":
		key := producerKey(c)
		if p := a.producers[key]; p != nil {
			p.Close(ctx) // detach ignores delivery errors
			delete(a.producers, key)
		}
		return result{"type": c.Type, "success": true, "status": 200}
	case "set-dynamic-header":
		a.dynHeaders[c.Name] = &dynamic{kind: c.ValueType, token: c.InitialValue}
		return result{"type": c.Type, "success": true}
	case "set-dynamic-param":
		a.dynParams[c.Name] = &dynamic{kind: c.ValueType}
		return result{"type": c.Type, "success": true}
	case "clear-dynamic":
		clear(a.dynHeaders)
		clear(a.dynParams)
		return result{"type": c.Type, "success": true}
	case "validate":
		return a.validate(c)
	}
	return result{"type": "error", "success": false, "commandType": c.Type, "errorCode": "NOT_SUPPORTED", "message": "unsupported command " + c.Type}
}

func dataBytes(d *string, binary bool) []byte {
	if d == nil {
		return nil
	}
	if binary {
		b, err := base64.StdEncoding.DecodeString(*d)
		if err == nil {
			return b
		}
	}
	return []byte(*d)
}

func (d *dynamic) next() string {
	switch d.kind {
	case "counter":
		d.counter++
		return strconv.Itoa(d.counter)
	case "timestamp":
		return strconv.FormatInt(time.Now().UnixMilli(), 10)
	default:
		return d.token
	}
}

// stream builds a handle with the command's headers and the dynamic headers and params resolved
// for this request, returning what was sent.
func (a *adapter) stream(path string, headers map[string]string, dyn bool) (*client.Stream, map[string]string, map[string]string) {
	h := http.Header{}
	var sentH, sentP map[string]string
	u := a.server + path
	if dyn {
		if len(a.dynHeaders) > 0 {
			sentH = map[string]string{}
			for name, d := range a.dynHeaders {
				v := d.next()
				sentH[name] = v
				h.Set(name, v)
			}
		}
		if len(a.dynParams) > 0 {
			sentP = map[string]string{}
			q := url.Values{}
			names := make([]string, 0, len(a.dynParams))
			for name := range a.dynParams {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				v := a.dynParams[name].next()
				sentP[name] = v
				q.Set(name, v)
			}
			u += "?" + q.Encode()
		}
	}
	for k, v := range headers {
		h.Set(k, v)
	}
	s, err := client.NewStream(u, client.Config{HTTPClient: a.hc, Header: h, Logger: slog.New(slog.DiscardHandler),
		Retry: client.RetryPolicy{MaxAttempts: 5, InitialDelay: 50 * time.Millisecond, MaxDelay: time.Second}})
	if err != nil {
		panic(err)
	}
	if ct := a.contentTypes[path]; ct != "" {
		s.SetContentType(ct)
	}
	return s, sentH, sentP
}

func producerKey(c command) string {
	return c.Path + "\x00" + c.ProducerID + "\x00" + strconv.FormatInt(c.Epoch, 10)
}

func (a *adapter) producer(c command, inFlight int, linger time.Duration, batch int) (*client.IdempotentProducer, error) {
	key := producerKey(c)
	if p := a.producers[key]; p != nil {
		return p, nil
	}
	s, _, _ := a.stream(c.Path, c.Headers, false)
	p, err := client.NewIdempotentProducer(s, c.ProducerID, client.ProducerConfig{Epoch: c.Epoch, Resume: true, AutoClaim: c.AutoClaim, MaxInFlight: inFlight, Linger: linger, MaxBatchBytes: batch})
	if err != nil {
		return nil, err
	}
	a.producers[key] = p
	return p, nil
}

func (a *adapter) create(ctx context.Context, c command) result {
	s, _, _ := a.stream(c.Path, c.Headers, false)
	o := client.CreateOptions{ContentType: c.ContentType, Closed: c.Closed, Data: dataBytes(c.Data, false)}
	if c.TTLSeconds != nil {
		o.TTL = time.Duration(*c.TTLSeconds) * time.Second
	}
	if c.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339Nano, c.ExpiresAt)
		if err != nil {
			return errResult(c.Type, &client.Error{Code: client.CodeInvalidArgument, Message: "expiresAt: " + err.Error()})
		}
		o.ExpiresAt = t
	}
	m, err := s.Create(ctx, o)
	if err != nil {
		return errResult(c.Type, err)
	}
	ct := c.ContentType
	if ct == "" {
		ct = client.DefaultContentType
	}
	a.contentTypes[c.Path] = ct
	return result{"type": "create", "success": true, "status": m.Status, "offset": m.NextOffset, "headers": flat(m.Header)}
}

func (a *adapter) head(ctx context.Context, c command) result {
	s, _, _ := a.stream(c.Path, c.Headers, false)
	m, err := s.Head(ctx)
	if err != nil {
		return errResult(c.Type, err)
	}
	if m.ContentType != "" {
		a.contentTypes[c.Path] = m.ContentType
	}
	r := result{"type": c.Type, "success": true, "status": 200, "offset": m.NextOffset, "headers": flat(m.Header)}
	if c.Type == "head" {
		r["contentType"] = m.ContentType
		r["streamClosed"] = m.Closed
		if m.TTL > 0 {
			r["ttlSeconds"] = int64(m.TTL / time.Second)
		}
		if !m.ExpiresAt.IsZero() {
			r["expiresAt"] = m.Header.Get(client.HeaderStreamExpiresAt)
		}
	}
	return r
}

func (a *adapter) append(ctx context.Context, c command) result {
	s, sentH, sentP := a.stream(c.Path, c.Headers, true)
	var opts []client.AppendOption
	if c.Seq != nil {
		opts = append(opts, client.WithSeq(strconv.FormatInt(*c.Seq, 10)))
	}
	if c.ProducerID != "" && c.ProducerEpoch != nil && c.ProducerSeq != nil {
		opts = append(opts, client.WithHeader(client.HeaderProducerID, c.ProducerID),
			client.WithHeader(client.HeaderProducerEpoch, strconv.FormatInt(*c.ProducerEpoch, 10)),
			client.WithHeader(client.HeaderProducerSeq, strconv.FormatInt(*c.ProducerSeq, 10)))
	}
	r, err := s.Append(ctx, dataBytes(c.Data, c.Binary), opts...)
	if err != nil {
		var ce *client.Error
		if c.Seq != nil && errors.As(err, &ce) && ce.Code == client.CodeConflict {
			return result{"type": "error", "success": false, "commandType": c.Type, "status": 409, "errorCode": "SEQUENCE_CONFLICT", "message": err.Error()}
		}
		return errResult(c.Type, err)
	}
	res := result{"type": "append", "success": true, "status": 200, "offset": r.NextOffset, "headers": flat(r.Header)}
	if r.Status == http.StatusNoContent && c.ProducerID != "" {
		res["duplicate"] = true
	}
	if v, err := strconv.ParseInt(r.Header.Get(client.HeaderProducerEpoch), 10, 64); err == nil {
		res["producerEpoch"] = v
	}
	if v, err := strconv.ParseInt(r.Header.Get(client.HeaderProducerSeq), 10, 64); err == nil {
		res["producerSeq"] = v
	}
	if sentH != nil {
		res["headersSent"] = sentH
	}
	if sentP != nil {
		res["paramsSent"] = sentP
	}
	return res
}

type chunkOut struct {
	Data   string `json:"data"`
	Binary bool   `json:"binary,omitempty"`
	Offset string `json:"offset,omitempty"`
}

func (a *adapter) read(c command) result {
	s, sentH, sentP := a.stream(c.Path, c.Headers, true)
	live := client.LiveNone
	switch string(c.Live) {
	case `"long-poll"`:
		live = client.LiveLongPoll
	case `"sse"`:
		live = client.LiveSSE
	case `true`:
		live = client.LiveAuto
	}
	timeout := 5 * time.Second
	if c.TimeoutMs != nil {
		timeout = time.Duration(*c.TimeoutMs) * time.Millisecond
	}
	maxChunks := 100
	if c.MaxChunks != nil {
		maxChunks = *c.MaxChunks
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if live == client.LiveNone {
		// A catch-up read has no live timeout of its own; the suite's timeoutMs is for live reads.
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
	}
	offset := c.Offset
	res := result{"type": "read", "success": true, "status": 200}
	chunks := []chunkOut{}
	var catchup []byte
	var last client.Chunk
	var seen bool
	for ch, err := range s.Read(ctx, client.ReadOptions{Offset: offset, Live: live}) {
		if err != nil {
			if live != client.LiveNone && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				break // the live read's timeout: timedOut below
			}
			return errResult(c.Type, err)
		}
		seen = true
		last = ch
		if live == client.LiveNone {
			catchup = mergeChunk(catchup, ch)
			continue
		}
		if !ch.Empty() {
			chunks = append(chunks, chunkOut{Data: chunkData(ch.Data, ch.ContentType), Offset: ch.NextOffset})
		}
		if len(chunks) >= maxChunks || (c.WaitForUpToDate && ch.UpToDate) {
			break
		}
	}
	timedOut := live != client.LiveNone && ctx.Err() != nil
	if live == client.LiveNone && len(catchup) > 0 {
		ct := s.ContentType()
		if d := chunkData(catchup, ct); d != "[]" || !client.IsJSON(ct) {
			chunks = append(chunks, chunkOut{Data: d, Offset: last.NextOffset})
		}
	}
	res["chunks"] = chunks
	if seen {
		if last.Status != 0 {
			res["status"] = last.Status
		}
		res["offset"] = last.NextOffset
		res["upToDate"] = last.UpToDate || timedOut
		res["streamClosed"] = last.Closed
		if last.Cursor != "" {
			res["cursor"] = last.Cursor
		}
	} else {
		if offset == "" {
			offset = "-1"
		}
		res["offset"] = offset
		res["upToDate"] = timedOut
		res["streamClosed"] = false
	}
	if sentH != nil {
		res["headersSent"] = sentH
	}
	if sentP != nil {
		res["paramsSent"] = sentP
	}
	return res
}

// mergeChunk joins catch-up chunks into one (JSON arrays merged into one array).
func mergeChunk(acc []byte, ch client.Chunk) []byte {
	if !client.IsJSON(ch.ContentType) {
		return append(acc, ch.Data...)
	}
	msgs, err := client.SplitJSON(ch.Data)
	if err != nil || len(msgs) == 0 {
		if acc == nil {
			return []byte("[]")
		}
		return acc
	}
	var all []json.RawMessage
	if len(acc) > 0 {
		all, _ = client.SplitJSON(acc)
	}
	all = append(all, msgs...)
	b, _ := json.Marshal(all)
	return b
}

func chunkData(d []byte, ct string) string {
	if client.IsJSON(ct) {
		var buf = make([]byte, 0, len(d))
		if msgs, err := client.SplitJSON(d); err == nil {
			if msgs == nil {
				msgs = []json.RawMessage{}
			}
			buf, _ = json.Marshal(msgs)
			return string(buf)
		}
	}
	return string(d)
}

func flat(h http.Header) map[string]string {
	m := map[string]string{}
	for k, vs := range h {
		if len(vs) > 0 {
			m[http.CanonicalHeaderKey(k)] = vs[0]
		}
	}
	return m
}

func (a *adapter) validate(c command) result {
	if c.Target == nil {
		return result{"type": "error", "success": false, "commandType": "validate", "errorCode": "INVALID_ARGUMENT", "message": "missing target"}
	}
	switch c.Target.Target {
	case "idempotent-producer":
		s, _ := client.NewStream(a.server+"/test-validate", client.Config{})
		o := client.ProducerConfig{}
		if c.Target.Epoch != nil {
			o.Epoch = *c.Target.Epoch
		}
		if c.Target.MaxBatchBytes != nil {
			o.MaxBatchBytes = *c.Target.MaxBatchBytes
		}
		id := "test-producer"
		if c.Target.ProducerID != nil {
			id = *c.Target.ProducerID
		}
		if _, err := client.NewIdempotentProducer(s, id, o); err != nil {
			return errResult("validate", err)
		}
		return result{"type": "validate", "success": true}
	case "retry-options":
		return result{"type": "validate", "success": true}
	}
	return result{"type": "error", "success": false, "commandType": "validate", "errorCode": "NOT_SUPPORTED", "message": "unknown validation target " + c.Target.Target}
}

// errResult maps a client error to the suite's error codes.
func errResult(cmd string, err error) result {
	r := result{"type": "error", "success": false, "commandType": cmd, "message": err.Error()}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status != 0 {
		r["status"] = ce.Status
	}
	// The suite's codes follow the HTTP status; the server's own code refines a few of them.
	code := "INTERNAL_ERROR"
	switch c := client.CodeOf(err); {
	case c == client.CodeStreamClosed:
		code, r["status"] = "STREAM_CLOSED", 409
	case c == client.CodeSequenceGap:
		code = "SEQUENCE_CONFLICT"
	case c == client.CodeParse:
		code = "PARSE_ERROR"
	case c == client.CodeNetwork:
		code = "NETWORK_ERROR"
	case c == client.CodeInvalidArgument:
		code = "INVALID_ARGUMENT"
	case c == client.CodeUnsupported || c == client.CodeMethodNotAllowed:
		code = "NOT_SUPPORTED"
	case c == client.CodeStaleEpoch:
		code = "UNEXPECTED_STATUS"
	case ce != nil && ce.Status == 404:
		code = "NOT_FOUND"
	case ce != nil && ce.Status == 409:
		code = "CONFLICT"
	case ce != nil && ce.Status == 400:
		code = "INVALID_OFFSET"
		if cmd != "read" {
			code = "UNEXPECTED_STATUS"
		}
	case ce != nil && ce.Status != 0:
		code = "UNEXPECTED_STATUS"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		code = "TIMEOUT"
	}
	r["errorCode"] = code
	return r
}
