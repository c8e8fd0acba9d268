package client

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Producer defaults (docs/client.md#exactly-once-producer), the same as the upstream TypeScript
// client's.
const (
	DefaultMaxBatchBytes    = 1 << 20
	DefaultLinger           = 5 * time.Millisecond
	DefaultMaxInFlight      = 5
	DefaultMaxBufferedBytes = 64 << 20
	DefaultRequestTimeout   = 30 * time.Second
)

// ProducerConfig configures an IdempotentProducer. Zero values select the defaults.
type ProducerConfig struct {
	// Epoch is the starting epoch. Zero (the default, without Resume) starts a fresh session:
	// the epoch is the clock's Unix milliseconds, above any earlier run's, and the producer claims
	// it as AutoClaim does (moving above a higher epoch the server knows for this id), so new data
	// is never taken for an earlier run's (docs/client.md#exactly-once-producer). A non-zero Epoch
	// is used as given: one above every earlier epoch of this id starts a new session, an earlier
	// one continues that session (see Resume).
	Epoch int64
	// Resume continues the session (producer id, Epoch) of an earlier run, Epoch 0 included, from
	// seq 0: batches the server already holds in that session are answered as duplicates and not
	// stored again (OnBatch reports them). Use it only to resend the same input after a failure;
	// new data sent in an earlier session's sequence numbers is dropped as a duplicate.
	Resume bool
	// AutoClaim lets a producer take over from an earlier instance with the same id: when the
	// server answers 403 (stale epoch) before this producer's first batch has succeeded, the
	// producer moves to the server's epoch + 1 and resends that batch as seq 0. Until then it sends
	// one batch at a time, so the claim cannot race the pipeline. A 403 after the claim means a
	// newer producer fenced this one; it is reported as *StaleEpochError, never fought. A fresh
	// session (Epoch 0 without Resume) always claims.
	AutoClaim bool
	// MaxBatchBytes seals a batch once its body reaches this size. Defaults to 1 MiB.
	MaxBatchBytes int
	// Linger is how long the first pending message waits for company before its batch is sent.
	// Defaults to 5 ms; a negative value sends as soon as a request slot is free.
	Linger time.Duration
	// MaxInFlight bounds the batches sent but not yet acknowledged. Defaults to 5.
	MaxInFlight int
	// MaxBufferedBytes bounds the bytes appended but not yet acknowledged; Append blocks
	// (AppendContext until its ctx ends) while a new message would exceed it. Defaults to 64 MiB.
	MaxBufferedBytes int
	// RequestTimeout bounds one HTTP attempt, after which the batch is retried. Defaults to 30 s.
	RequestTimeout time.Duration
	// OnError is called once, from a background goroutine, with the first delivery error.
	OnError func(error)
	// OnBatch, when set, is called from a background goroutine with the outcome of every batch
	// the server acknowledged, in no particular order, before Flush or Close return for it. It
	// tells stored batches from duplicates: see BatchOutcome.
	OnBatch func(BatchOutcome)
	// Logger receives debug logs of retries. Defaults to the stream's logger.
	Logger *slog.Logger
}

// IdempotentProducer writes to a stream exactly once per message using the protocol's
// (Producer-Id, Producer-Epoch, Producer-Seq) deduplication (docs/server.md#idempotent-producers,
// docs/client.md#exactly-once-producer). Append returns at
// once; messages are batched and sent in the background, up to MaxInFlight batches pipelined.
// It is safe for concurrent use; messages appended by one goroutine keep their order.
type IdempotentProducer struct {
	s      *Stream
	id     string
	o      ProducerConfig
	isJSON bool
	ct     string
	log    *slog.Logger

	autoClaim bool // AutoClaim, or a fresh session

	ctx    context.Context // ends when the producer is aborted
	cancel context.CancelFunc
	onWire atomic.Int64

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced on every state change
	epoch        int64
	nextSeq      int64
	claimed      bool // the epoch is known to be ours (always true without AutoClaim)
	pending      []byte
	pendingCount int
	pendingSize  int
	pendingReady bool // linger elapsed or flush asked: send pending when a slot frees
	lingerGen    uint64
	lingerArmed  bool
	queue        []*batch // sealed, full batches waiting for a slot, in order
	queuedCount  int
	active       int // dispatched batches not yet finished
	buffered     int // bytes appended and not yet acknowledged
	seqs         map[seqKey]*seqState
	err          error // first delivery error, sticky until Restart
	closed       bool
	lastOffset   string
	closeResult  *AppendResult
	closeBatch   *batch // the close request, reused (same seq) when CloseStream is called again
}

// BatchOutcome is how the server acknowledged one batch (ProducerConfig.OnBatch).
type BatchOutcome struct {
	// Epoch and Seq identify the batch.
	Epoch, Seq int64
	// Messages is the number of messages in it.
	Messages int
	// Duplicate reports that the server answered "duplicate" (204): it already held this
	// (producer id, epoch, seq) before this request, so this request stored nothing.
	Duplicate bool
	// Resent reports that an earlier attempt of this batch may have reached the server (it ended
	// with a network error, 429 or 5xx); a Resent Duplicate is normally that attempt, stored. A
	// Duplicate that is not Resent means the server held this (epoch, seq) before the producer's
	// only attempt: another producer with the same id and epoch wrote it (and this batch's
	// messages were not stored), or something between client and server repeated the request.
	Resent bool
}

type batch struct {
	body  []byte
	count int
	size  int // message bytes, as counted in buffered
	epoch int64
	seq   int64
	// resent: an attempt of the current (epoch, seq) may have reached the server.
	resent bool
}

type seqKey struct{ epoch, seq int64 }

type seqState struct {
	done chan struct{}
	err  error
}

// NewIdempotentProducer returns a producer writing to s as producerID. The stream's content type
// must be known (from Create or Head) or it is taken to be application/octet-stream.
func NewIdempotentProducer(s *Stream, producerID string, o ProducerConfig) (*IdempotentProducer, error) {
	switch {
	case producerID == "":
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "producer id must not be empty"}
	case o.Epoch < 0:
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "epoch must be >= 0"}
	case o.MaxBatchBytes < 0:
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "maxBatchBytes must be > 0 (0 selects the default)"}
	case o.MaxInFlight < 0:
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "maxInFlight must be > 0 (0 selects the default)"}
	case o.MaxBufferedBytes < 0:
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "maxBufferedBytes must be > 0 (0 selects the default)"}
	case o.RequestTimeout < 0:
		return nil, &Error{Code: CodeInvalidArgument, Op: "new producer", Message: "requestTimeout must be > 0 (0 selects the default)"}
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	} else if o.Linger < 0 {
		o.Linger = 0
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxBufferedBytes == 0 {
		o.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if o.MaxBufferedBytes < o.MaxBatchBytes {
		o.MaxBufferedBytes = o.MaxBatchBytes
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	ct := s.ContentType()
	if ct == "" {
		ct = DefaultContentType
	}
	epoch, autoClaim := o.Epoch, o.AutoClaim
	if epoch == 0 && !o.Resume {
		// A fresh session: an epoch no earlier run of this id used (it ran at an earlier
		// millisecond), claimed above the server's should its clock have been ahead.
		epoch, autoClaim = max(1, s.clock.Now().UnixMilli()), true
	}
	p := &IdempotentProducer{
		s: s, id: producerID, o: o, ct: ct, isJSON: IsJSON(ct), log: o.Logger, autoClaim: autoClaim,
		changed: make(chan struct{}), epoch: epoch, claimed: !autoClaim, seqs: map[seqKey]*seqState{},
	}
	if p.log == nil {
		p.log = s.log
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Epoch returns the current epoch.
func (p *IdempotentProducer) Epoch() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch
}

// NextSeq returns the sequence number the next dispatched batch gets.
func (p *IdempotentProducer) NextSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextSeq
}

// PendingCount returns the messages appended but not yet sent (in the open batch or in sealed
// batches waiting for a request slot).
func (p *IdempotentProducer) PendingCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pendingCount + p.queuedCount
}

// InFlightCount returns the batches whose HTTP request is on the wire right now (not those waiting
// for a backoff or for earlier sequences).
func (p *IdempotentProducer) InFlightCount() int { return int(p.onWire.Load()) }

// LastOffset returns the greatest Stream-Next-Offset acknowledged so far.
func (p *IdempotentProducer) LastOffset() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOffset
}

// Err returns the first delivery error, or nil.
func (p *IdempotentProducer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// notify wakes every waiter. Call with p.mu held.
func (p *IdempotentProducer) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Append adds a message: for JSON streams one JSON value, for other streams raw bytes. It returns
// once the message is buffered (blocking only while MaxBufferedBytes are unacknowledged); the
// message is delivered in the background. It fails at once when the producer is closed or has
// failed (see Err).
func (p *IdempotentProducer) Append(data []byte) error {
	return p.AppendContext(context.Background(), data)
}

// AppendJSON marshals v and appends it as one JSON message.
func (p *IdempotentProducer) AppendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return &Error{Code: CodeInvalidArgument, Op: "producer append", Message: "value cannot be marshalled", Err: err}
	}
	return p.AppendContext(context.Background(), b)
}

// AppendContext is Append that gives up with ctx's error if the buffer stays full until ctx ends.
func (p *IdempotentProducer) AppendContext(ctx context.Context, data []byte) error {
	if p.isJSON && !json.Valid(data) {
		// One invalid message would make the server refuse its whole batch.
		return &Error{Code: CodeInvalidArgument, Op: "producer append", Message: "a JSON stream's message must be one valid JSON value"}
	}
	if !p.isJSON && len(data) == 0 {
		return &Error{Code: CodeInvalidArgument, Op: "producer append", Message: "message must not be empty"}
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return &Error{Code: CodeProducerClosed, Op: "producer append", Message: "the producer is closed"}
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return &Error{Code: CodeProducerFailed, Op: "producer append", Message: "an earlier batch failed; call Restart to continue", Err: err}
		}
		if p.buffered == 0 || p.buffered+len(data) <= p.o.MaxBufferedBytes {
			p.add(data)
			p.mu.Unlock()
			return nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// add puts data in the open batch. Call with p.mu held.
func (p *IdempotentProducer) add(data []byte) {
	if p.pendingCount > 0 && len(p.pending)+len(data)+2 > p.o.MaxBatchBytes {
		p.seal()
	}
	if p.isJSON {
		if p.pendingCount == 0 {
			p.pending = append(p.pending, '[')
		} else {
			p.pending = append(p.pending, ',')
		}
	}
	p.pending = append(p.pending, data...)
	p.pendingCount++
	p.pendingSize += len(data)
	p.buffered += len(data)
	if len(p.pending) >= p.o.MaxBatchBytes {
		p.seal()
	} else if !p.lingerArmed && !p.pendingReady {
		p.lingerArmed = true
		gen := p.lingerGen
		p.s.clock.AfterFunc(p.o.Linger, func() { p.lingerFired(gen) })
	}
	p.dispatch()
}

func (p *IdempotentProducer) lingerFired(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.lingerGen {
		return
	}
	p.lingerArmed = false
	if p.pendingCount > 0 {
		p.pendingReady = true
		p.dispatch()
	}
}

// seal moves the open batch to the queue. Call with p.mu held.
func (p *IdempotentProducer) seal() {
	if p.pendingCount == 0 {
		return
	}
	if p.isJSON {
		p.pending = append(p.pending, ']')
	}
	p.queue = append(p.queue, &batch{body: p.pending, count: p.pendingCount, size: p.pendingSize})
	p.queuedCount += p.pendingCount
	p.pending = make([]byte, 0, min(cap(p.pending), p.o.MaxBatchBytes+2))
	p.pendingCount, p.pendingSize = 0, 0
	p.pendingReady = false
	p.lingerGen++
	p.lingerArmed = false
}

// dispatch starts sends while there are slots. While the epoch is unclaimed (AutoClaim) only one
// batch is active. An open batch whose linger elapsed is sealed only when a slot is free, so a busy
// pipeline yields bigger batches instead of a queue of small ones. Call with p.mu held.
func (p *IdempotentProducer) dispatch() {
	for p.err == nil && p.active < p.o.MaxInFlight && (p.claimed || p.active == 0) {
		if len(p.queue) == 0 {
			if !p.pendingReady || p.pendingCount == 0 {
				return
			}
			p.seal()
		}
		b := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.queuedCount -= b.count
		b.epoch, b.seq = p.epoch, p.nextSeq
		p.nextSeq++
		p.seqs[seqKey{b.epoch, b.seq}] = &seqState{done: make(chan struct{})}
		p.active++
		go p.send(b)
	}
}

// outcome of one attempt
type attemptResult struct {
	status      int
	header      http.Header
	body        []byte
	err         error
	retryAfter  time.Duration
	expectedSeq int64
}

func (p *IdempotentProducer) post(b *batch, body []byte, closeStream bool) attemptResult {
	ctx, cancel := context.WithTimeout(p.ctx, p.o.RequestTimeout)
	defer cancel()
	h := http.Header{
		HeaderProducerID:    {p.id},
		HeaderProducerEpoch: {strconv.FormatInt(b.epoch, 10)},
		HeaderProducerSeq:   {strconv.FormatInt(b.seq, 10)},
	}
	if len(body) > 0 {
		h.Set("Content-Type", p.ct)
	}
	if closeStream {
		h.Set(HeaderStreamClosed, "true")
	}
	p.onWire.Add(1)
	resp, err := p.s.send(ctx, http.MethodPost, p.s.url, h, body)
	if err != nil {
		p.onWire.Add(-1)
		return attemptResult{err: err}
	}
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	p.onWire.Add(-1)
	if err != nil {
		return attemptResult{err: err}
	}
	return attemptResult{status: resp.StatusCode, header: resp.Header, body: rb,
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), p.s.clock.Now())}
}

// deliver sends one batch (or the close request) until it is acknowledged or fails for good.
// Network errors, 429 and 5xx resend the same (epoch, seq): the server deduplicates, so a resend
// of an applied batch is acknowledged as a duplicate (204) instead of being written twice.
func (p *IdempotentProducer) deliver(b *batch, closeStream bool) (AppendResult, error) {
	failures := 0
	gapWaits := 0
	b.resent = false
	for {
		r := p.post(b, b.body, closeStream)
		switch {
		case r.err != nil || retryableStatus(r.status):
			if p.ctx.Err() != nil {
				return AppendResult{}, &Error{Code: CodeProducerClosed, Op: "producer send", Message: "the producer was aborted before the batch was acknowledged", Err: p.ctx.Err()}
			}
			failures++
			b.resent = true
			if failures >= p.s.retry.MaxAttempts {
				if r.err != nil {
					return AppendResult{}, &Error{Code: CodeNetwork, Op: "producer send", URL: p.s.url, Err: r.err}
				}
				return AppendResult{}, statusError("producer send", p.s.url, &http.Response{StatusCode: r.status, Header: r.header}, r.body)
			}
			d := p.s.retry.delay(failures, r.retryAfter)
			p.s.retry.report("producer send", failures, d, r.status, r.err)
			p.log.Debug("producer retry", "epoch", b.epoch, "seq", b.seq, "status", r.status, "err", r.err, "delay", d)
			if sleep(p.ctx, p.s.clock, d) != nil {
				return AppendResult{}, &Error{Code: CodeProducerClosed, Op: "producer send", Message: "the producer was aborted before the batch was acknowledged", Err: p.ctx.Err()}
			}
		case r.status == http.StatusOK || r.status == http.StatusNoContent:
			return AppendResult{Status: r.status, NextOffset: r.header.Get(HeaderStreamNextOffset),
				Closed: isTrue(r.header.Get(HeaderStreamClosed)), Header: r.header}, nil
		case r.status == http.StatusForbidden:
			current, perr := strconv.ParseInt(r.header.Get(HeaderProducerEpoch), 10, 64)
			if c := r.header.Get(HeaderErrorCode); perr != nil || (c != "" && c != string(CodeStaleEpoch)) {
				// Not a fencing (which names the server's epoch) but a refusal of the
				// credentials: claiming a new epoch cannot help.
				return AppendResult{}, statusError("producer send", p.s.url, &http.Response{StatusCode: r.status, Header: r.header}, r.body)
			}
			p.mu.Lock()
			if !p.autoClaim || p.claimed {
				p.mu.Unlock()
				return AppendResult{}, &StaleEpochError{CurrentEpoch: current}
			}
			// Claim: this is the only active request (dispatch guarantees it), so no other batch
			// holds a seq of the old epoch.
			old := seqKey{b.epoch, b.seq}
			st := p.seqs[old]
			delete(p.seqs, old)
			p.epoch = max(current+1, p.epoch+1)
			b.epoch, b.seq = p.epoch, 0
			b.resent = false // the new (epoch, seq) has never been sent
			p.nextSeq = 1
			if st != nil {
				p.seqs[seqKey{b.epoch, b.seq}] = st
			}
			p.mu.Unlock()
			p.log.Debug("producer auto-claim", "epoch", b.epoch)
		case r.status == http.StatusConflict:
			if isTrue(r.header.Get(HeaderStreamClosed)) {
				return AppendResult{}, &StreamClosedError{FinalOffset: r.header.Get(HeaderStreamNextOffset)}
			}
			exp, err := strconv.ParseInt(r.header.Get(HeaderProducerExpectedSeq), 10, 64)
			if err != nil {
				return AppendResult{}, statusError("producer send", p.s.url, &http.Response{StatusCode: r.status, Header: r.header}, r.body)
			}
			if exp >= b.seq || gapWaits > 1000 {
				rec, err := strconv.ParseInt(r.header.Get(HeaderProducerReceivedSeq), 10, 64)
				if err != nil {
					rec = b.seq
				}
				return AppendResult{}, &SequenceGapError{ExpectedSeq: exp, ReceivedSeq: rec}
			}
			// An earlier batch has not landed yet (requests overtook each other): wait for every
			// seq in [exp, b.seq) of this epoch, then resend.
			gapWaits++
			if err := p.waitSeqs(b.epoch, exp, b.seq); err != nil {
				return AppendResult{}, err
			}
		default:
			return AppendResult{}, statusError("producer send", p.s.url, &http.Response{StatusCode: r.status, Header: r.header}, r.body)
		}
	}
}

// waitSeqs waits until every seq in [from, to) of epoch has finished, returning the first failure.
func (p *IdempotentProducer) waitSeqs(epoch, from, to int64) error {
	for s := from; s < to; s++ {
		p.mu.Lock()
		st := p.seqs[seqKey{epoch, s}]
		p.mu.Unlock()
		if st == nil {
			continue // finished successfully and pruned
		}
		select {
		case <-st.done:
			if st.err != nil {
				return st.err
			}
		case <-p.ctx.Done():
			return &Error{Code: CodeProducerClosed, Op: "producer send", Message: "the producer was aborted before the batch was acknowledged", Err: p.ctx.Err()}
		}
	}
	return nil
}

func (p *IdempotentProducer) send(b *batch) {
	res, err := p.deliver(b, false)
	if err == nil && p.o.OnBatch != nil {
		// Before the batch counts as finished, so Flush and Close return after its report.
		p.o.OnBatch(BatchOutcome{Epoch: b.epoch, Seq: b.seq, Messages: b.count,
			Duplicate: res.Status == http.StatusNoContent, Resent: b.resent})
	}
	var report func(error)
	p.mu.Lock()
	p.active--
	p.buffered -= b.size
	key := seqKey{b.epoch, b.seq}
	if st := p.seqs[key]; st != nil {
		st.err = err
		close(st.done)
		if err == nil {
			delete(p.seqs, key) // waiters treat a missing entry as success
		}
	}
	if err == nil {
		p.claimed = true
		if res.NextOffset > p.lastOffset {
			p.lastOffset = res.NextOffset
		}
	} else if p.err == nil {
		p.err = err
		report = p.o.OnError
		// Nothing after a failed seq can land in this epoch: drop what waits.
		for _, q := range p.queue {
			p.buffered -= q.size
		}
		p.queue, p.queuedCount = nil, 0
		p.buffered -= p.pendingSize
		p.pending, p.pendingCount, p.pendingSize, p.pendingReady = p.pending[:0], 0, 0, false
		p.lingerGen++
		p.lingerArmed = false
	}
	p.dispatch()
	p.notify()
	p.mu.Unlock()
	if report != nil {
		report(err)
	}
}

// Flush sends everything appended so far and waits until it is acknowledged. It returns the first
// delivery error, or ctx's error if ctx ends first (the batches keep going in the background).
func (p *IdempotentProducer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.pendingCount > 0 {
		p.pendingReady = true
		p.dispatch()
	}
	p.mu.Unlock()
	for {
		p.mu.Lock()
		idle := p.active == 0 && (p.err != nil || (len(p.queue) == 0 && p.pendingCount == 0))
		err := p.err
		ch := p.changed
		p.mu.Unlock()
		if idle {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the producer without closing the stream: it refuses new appends, flushes, and
// returns the first delivery error. If ctx ends first, requests still running are cancelled; what
// the server acknowledged stays, and ctx's error is returned. Close is idempotent.
func (p *IdempotentProducer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	if ctx.Err() != nil {
		p.cancel()
		p.waitIdle()
	} else {
		p.cancel()
	}
	return err
}

// waitIdle waits for every active batch to finish (after an abort they finish quickly).
func (p *IdempotentProducer) waitIdle() {
	for {
		p.mu.Lock()
		idle := p.active == 0
		ch := p.changed
		p.mu.Unlock()
		if idle {
			return
		}
		<-ch
	}
}

// CloseStream flushes, then closes the stream through the producer: a POST
// with Stream-Closed and the next seq, carrying final (one message; may be nil) atomically with
// the closure. Retries are deduplicated like appends. A repeated call returns the first result. If
// the flush fails, CloseStream returns its error and leaves the producer open, so the caller can
// Restart and close again.
func (p *IdempotentProducer) CloseStream(ctx context.Context, final []byte) (AppendResult, error) {
	p.mu.Lock()
	if p.closeResult != nil {
		r := *p.closeResult
		p.mu.Unlock()
		return r, nil
	}
	p.closed = true
	p.mu.Unlock()
	if err := p.Flush(ctx); err != nil {
		p.mu.Lock()
		p.closed = false // leave the producer usable: Restart, then close again
		p.mu.Unlock()
		return AppendResult{}, err
	}
	body := final
	if p.isJSON && len(final) > 0 {
		if !json.Valid(final) {
			return AppendResult{}, &Error{Code: CodeInvalidArgument, Op: "producer close", Message: "final message must be one valid JSON value"}
		}
		body = append(append([]byte{'['}, final...), ']')
	}
	p.mu.Lock()
	b := p.closeBatch
	if b == nil || b.epoch != p.epoch {
		b = &batch{epoch: p.epoch, seq: p.nextSeq}
		p.nextSeq++
		p.closeBatch = b
	}
	b.body = body
	p.seqs[seqKey{b.epoch, b.seq}] = &seqState{done: make(chan struct{})}
	p.active++
	p.mu.Unlock()

	type out struct {
		r   AppendResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := p.deliver(b, true)
		done <- out{r, err}
	}()
	var o out
	select {
	case o = <-done:
	case <-ctx.Done():
		p.cancel()
		o = <-done
		o.err = ctx.Err()
	}
	p.mu.Lock()
	p.active--
	if st := p.seqs[seqKey{b.epoch, b.seq}]; st != nil {
		st.err = o.err
		close(st.done)
	}
	if o.err == nil {
		p.claimed = true
		p.closeResult = &o.r
		if o.r.NextOffset > p.lastOffset {
			p.lastOffset = o.r.NextOffset
		}
	}
	p.notify()
	p.mu.Unlock()
	if o.err != nil {
		return AppendResult{}, o.err
	}
	return o.r, nil
}

// Restart flushes, then starts a new session: epoch + 1, seq 0, and a cleared delivery error, so a
// producer that failed (or was fenced and must take over explicitly) can continue. It returns the
// flush's error, if any, after restarting, so the caller learns what was not delivered.
func (p *IdempotentProducer) Restart(ctx context.Context) error {
	ferr := p.Flush(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return &Error{Code: CodeProducerClosed, Op: "producer restart", Message: "the producer is closed"}
	}
	p.epoch++
	p.nextSeq = 0
	p.err = nil
	p.claimed = !p.autoClaim
	clear(p.seqs)
	p.notify()
	return ferr
}
