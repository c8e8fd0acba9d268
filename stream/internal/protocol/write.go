package protocol

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/sliced"
)

// DefaultContentType is the content type of a stream created without one.
const DefaultContentType = "application/octet-stream"

// CreateRequest asks to create (or idempotently ensure) a stream (docs/store.md#forks).
type CreateRequest struct {
	// Path is the stream's path in the store.
	Path string
	// ContentType is the requested content type; empty means DefaultContentType, or the source's
	// for a fork.
	ContentType string
	// TTLSeconds is the sliding TTL when HasTTL.
	TTLSeconds int64
	// HasTTL asks for a sliding TTL.
	HasTTL bool
	// ExpiresAt is the absolute expiry; zero for none.
	ExpiresAt time.Time
	// Closed creates the stream closed.
	Closed bool
	// ForkedFrom is the source's path when creating a fork; empty otherwise.
	ForkedFrom string
	// ForkOffset is the divergence position when HasForkOffset; the source's tail otherwise.
	ForkOffset int64
	// HasForkOffset says ForkOffset was given.
	HasForkOffset bool
	// ForkSubOffset moves the divergence point N bytes (or messages) into the record that starts
	// at ForkOffset.
	ForkSubOffset int64
	// Body is the initial content (JSON streams: a JSON value, [] for none).
	Body []byte
	// Provenance, when set, is applied to the JSON messages of Body.
	Provenance *Provenance
}

// CreateResult is the outcome of CreateStream.
type CreateResult struct {
	// Created is true when a new stream was made (201), false for an identical existing one (200).
	Created bool
	// Info is the stream's metadata after the request.
	Info StreamInfo
}

// ProducerHeaders identify one request of an idempotent producer
// (docs/store.md#idempotent-producers).
type ProducerHeaders struct {
	// ID names the producer; non-empty.
	ID string
	// Epoch is the producer's epoch.
	Epoch int64
	// Seq is the request's sequence number within the epoch.
	Seq int64
}

// AppendRequest asks to append a record, optionally closing the stream (docs/store.md#appending).
type AppendRequest struct {
	// Path is the stream's path in the store.
	Path string
	// ContentType is the request's content type; ignored for a close-only request.
	ContentType string
	// Body is the record (JSON streams: a JSON value, one array level flattened). Empty with
	// Close means close-only.
	Body []byte
	// Close closes the stream with (after) this record.
	Close bool
	// StreamSeq, when non-empty, must be byte-wise greater than the last one seen on the stream.
	StreamSeq string
	// Producer makes the request part of an idempotent producer's sequence.
	Producer *ProducerHeaders
	// ExpectedTail, when HasExpectedTail, is a precondition: the stream's tail must be exactly
	// this position, or the append is refused with OFFSET_CONFLICT (409).
	ExpectedTail int64
	// HasExpectedTail enables ExpectedTail.
	HasExpectedTail bool
	// Provenance, when set, is applied to the JSON messages of Body.
	Provenance *Provenance
}

// Provenance is what the HTTP server asks of a writer's JSON messages (docs/server.md#provenance),
// applied by the one scan that splits the body, so no rule costs a parse of its own. In every
// event-shaped message (an object whose "type" is a non-empty string):
//   - every member whose key is "source" in any letter case, as encoding/json would fold it, is
//     dropped, and "source": Source is appended when Source is set: only the server says where an
//     event comes from;
//   - an "idempotencyKey" starting with ReservedKeyPrefix (when not empty) refuses the request with
//     RESERVED_IDEMPOTENCY_KEY, data {prefix, index} (index: the message's in an array);
//   - with TraceParent set, a "metadata" object that names no "traceparent" (or no metadata) gets
//     TraceParent and TraceState first in it (foldtype.WithTraceContext), so the processors
//     continue the append's trace (docs/engine.md#tracing). Metadata that is not an object is kept.
//
// Other messages are stored as they are. A body that is not valid UTF-8 is refused with
// BAD_REQUEST. The rules apply wherever the stream's messages are JSON, also when the request
// named no content type (a fork inherits its source's). A refusal comes where the store refuses a
// malformed body: after the stream's own checks (closed, producer, content type).
type Provenance struct {
	// Source is the compact JSON of the source to set; nil sets none.
	Source []byte
	// ReservedKeyPrefix is the idempotency-key namespace reserved for processors.
	ReservedKeyPrefix string
	// TraceParent and TraceState are the W3C trace context of the append's span; "" writes none.
	TraceParent, TraceState string
}

// apply applies the provenance rules to the scanned messages of a body.
func (p *Provenance) apply(msgs []rawjson.Message, isArray bool) error {
	for i := range msgs {
		m := &msgs[i]
		if t := m.Member(catalog.MType); m.Raw[0] != '{' || t.Kinds == 0 || t.Value[0] != '"' || len(t.Value) == 2 {
			continue // not event-shaped: a plain message, which never carries a source
		}
		if p.ReservedKeyPrefix != "" {
			if key, _ := m.Member(catalog.MKey).String(); strings.HasPrefix(key, p.ReservedKeyPrefix) {
				data := map[string]any{"prefix": p.ReservedKeyPrefix}
				where := ""
				if isArray {
					data["index"] = i
					where = " (message " + strconv.Itoa(i) + ")"
				}
				return foldtype.NewError(foldtype.CodeReservedKey, data,
					"idempotency key %q%s starts with %q, which is reserved for processors' own events", key, where, p.ReservedKeyPrefix)
			}
		}
		if len(m.Folded()) > 0 || p.Source != nil {
			*m = m.Edit(m.Folded(), catalog.MSource, p.Source)
		}
		if p.TraceParent != "" {
			md := m.Member(catalog.MMetadata)
			if md.Kinds == 0 || md.Kinds == rawjson.KindObject {
				if traced := foldtype.WithTraceContext(md.Value, p.TraceParent, p.TraceState); len(traced) != len(md.Value) {
					*m, _ = m.Replace(catalog.MMetadata, traced)
				}
			}
		}
	}
	return nil
}

// AppendResult is the outcome of AppendRecord.
type AppendResult struct {
	// Tail is the stream's tail after the request.
	Tail int64
	// Closed reports the stream is closed after the request.
	Closed bool
	// Duplicate reports a producer retry that changed nothing (204).
	Duplicate bool
	// Epoch and Seq echo the producer's epoch and the highest accepted seq (producer requests).
	Epoch, Seq int64
}

// MaxMessagesPerRecord caps the messages of one JSON append, so one request cannot hold the
// writer for long.
const MaxMessagesPerRecord = 100000

// splitJSON validates a JSON body and flattens a top-level array one level
// (docs/store.md#appending) into its messages, each compact, keeping what the one scan found of
// each message, with the provenance rules (nil: none) applied. An empty array is refused unless
// allowEmpty. The store reads a message's type, idempotency key, payload and the
// rest from what the scan found (eventKeyOf, controlOfMessage, eventOf) and never parses the
// message again: a body costs one parse, whoever wrote it.
func splitJSON(body []byte, allowEmpty bool, prov *Provenance) ([]rawjson.Message, error) {
	body = bytes.TrimSpace(body) // Unicode space around the body, as encoding/json allows only ASCII
	if prov != nil && !utf8.Valid(body) {
		return nil, catalog.Perr(foldtype.CodeBadRequest, "the body is not valid UTF-8 (JSON text must be)")
	}
	msgs, isArray, n, err := rawjson.Split(body, catalog.MsgKeys, MaxMessagesPerRecord)
	switch {
	case errors.Is(err, rawjson.ErrTooMany):
		return nil, foldtype.NewError(foldtype.CodeTooLarge,
			map[string]any{foldtype.DataLimit: int64(MaxMessagesPerRecord), foldtype.DataLimitUnit: "messages"},
			"a JSON array of %d messages is over the limit of %d per request; split it", n, MaxMessagesPerRecord)
	case errors.Is(err, rawjson.ErrTooLong):
		return nil, foldtype.NewError(foldtype.CodeTooLarge,
			map[string]any{foldtype.DataLimit: int64(4 << 30), foldtype.DataLimitUnit: "bytes"},
			"a JSON body of %d bytes is over the limit of %d bytes (4 GiB)", len(body), int64(4<<30))
	case err != nil:
		return nil, catalog.Perr(foldtype.CodeBadRequest, "body is not valid JSON")
	case isArray && n == 0 && !allowEmpty:
		return nil, catalog.Perr(foldtype.CodeBadRequest, "an empty JSON array appends nothing; send at least one message")
	}
	if prov != nil {
		if err := prov.apply(msgs, isArray); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// CreateStream creates a stream, or confirms an identical existing one.
func (p *Protocol) CreateStream(ctx context.Context, req CreateRequest) (CreateResult, error) {
	if req.HasTTL && !req.ExpiresAt.IsZero() {
		return CreateResult{}, catalog.Perr(foldtype.CodeBadRequest, "give a TTL or an expiry time, not both")
	}
	if req.HasTTL && req.TTLSeconds <= 0 {
		return CreateResult{}, catalog.Perr(foldtype.CodeBadRequest, "a TTL must be at least one second, not %d", req.TTLSeconds)
	}
	var res CreateResult
	err := p.k.Write(ctx, func(t *kernel.Tx) error {
		var err error
		res, err = p.create(t, req)
		return err
	})
	return res, err
}

func (p *Protocol) create(t *kernel.Tx, req CreateRequest) (CreateResult, error) {
	if req.ForkedFrom == "" && t.Unheld(req.Path) {
		// Most creates name a fresh path: insert without reading the path first. Whatever
		// stops that (a refused request, a taken path) is decided by the reading way below,
		// which answers exactly as it always did; nothing was written.
		res, err := p.createAt(t, req, true)
		if !errors.Is(err, errPathHeld) {
			return res, err
		}
	}
	return p.createAt(t, req, false)
}

// errPathHeld stops an unread create (createAt's fresh) before it wrote anything: the path is
// taken, the driver cannot insert only if absent, or the request is refused — which a stream at
// the path could change, so the create is decided again after reading it.
var errPathHeld = errors.New("stream store: create: path to be read")

// createAt creates the stream (or finds the existing one). fresh skips reading the path: any
// refusal before the insert, and a path the insert finds taken, return errPathHeld with nothing
// written.
func (p *Protocol) createAt(t *kernel.Tx, req CreateRequest, fresh bool) (CreateResult, error) {
	now := t.Now()
	var existing *driver.Stream
	var em *kernel.StreamState
	var err error
	if !fresh {
		em, err = t.Stream(req.Path)
		if err != nil && !errors.Is(err, driver.ErrNoStream) {
			return CreateResult{}, err
		}
	}
	if em != nil {
		row := em.Row
		row.Tail = em.Tail
		existing = &row
		lv, err := p.c.Judge(t.Context(), t.Driver(), existing, now)
		if err != nil {
			return CreateResult{}, err
		}
		switch lv {
		case catalog.Gone:
			return CreateResult{}, catalog.Perr(foldtype.CodeConflict, "stream %s is deleted but its forks still use the path", catalog.QuotePath(req.Path))
		case catalog.Missing:
			if err := p.hardDelete(t, existing); err != nil {
				return CreateResult{}, err
			}
			existing = nil
		}
	}

	if !req.ExpiresAt.IsZero() && !req.ExpiresAt.After(now) {
		return CreateResult{}, heldOr(fresh, catalog.Perr(foldtype.CodeBadRequest, "the expiry time %s has already passed",
			req.ExpiresAt.UTC().Format(time.RFC3339Nano)))
	}

	// Resolve the fork source and inherited settings.
	var src *driver.Stream
	if req.ForkedFrom != "" {
		sm, err := p.c.LiveStream(t, req.ForkedFrom)
		if err != nil {
			if errors.Is(err, foldtype.ErrStreamGone) {
				return CreateResult{}, catalog.Perr(foldtype.CodeConflict, "fork source %s is deleted", catalog.QuotePath(req.ForkedFrom))
			}
			return CreateResult{}, err
		}
		row := sm.Row
		row.Tail = sm.Tail
		src = &row
		if req.ContentType == "" {
			req.ContentType = src.ContentType
		} else if kernel.MediaType(req.ContentType) != kernel.MediaType(src.ContentType) {
			return CreateResult{}, catalog.Perr(foldtype.CodeConflict, "fork content type %q differs from the source's %q", req.ContentType, src.ContentType)
		}
		if !req.HasTTL && req.ExpiresAt.IsZero() {
			req.HasTTL, req.TTLSeconds = src.TTLSeconds.Valid, src.TTLSeconds.Int64
			if src.ExpiresAtMs.Valid {
				req.ExpiresAt = time.UnixMilli(src.ExpiresAtMs.Int64)
			}
		}
	}
	if req.ContentType == "" {
		req.ContentType = DefaultContentType
	}
	if existing == nil {
		if err := catalog.ValidateStreamName(req.Path); err != nil {
			return CreateResult{}, heldOr(fresh, err)
		}
	}

	if existing != nil {
		if !sameConfig(existing, src, req) {
			return CreateResult{}, catalog.Perr(foldtype.CodeConflict, "stream %s already exists with a different configuration", catalog.QuotePath(req.Path))
		}
		return CreateResult{Created: false, Info: catalog.InfoOf(existing)}, nil
	}

	isJSON := kernel.IsJSONContentType(req.ContentType)
	var msgs []rawjson.Message
	if isJSON && len(bytes.TrimSpace(req.Body)) > 0 {
		if msgs, err = splitJSON(req.Body, true, req.Provenance); err != nil {
			return CreateResult{}, heldOr(fresh, err)
		}
	}

	// Fork point and the materialised prefix of a split record.
	var forkOffset int64
	var prefix *driver.Record
	if src != nil {
		forkOffset = src.Tail
		if req.HasForkOffset {
			forkOffset = req.ForkOffset
		}
		if forkOffset < 0 || forkOffset > src.Tail {
			return CreateResult{}, catalog.Perr(foldtype.CodeBadRequest, "fork offset is past the source's tail")
		}
		// The tail is always a boundary, even with no message ending there: an event batch ending
		// with an ephemeral moves the durable mark to the ephemeral's offset.
		if forkOffset > 0 && forkOffset < src.Tail {
			ok, err := isBoundary(t.Context(), t.Driver(), src, forkOffset)
			if err != nil {
				return CreateResult{}, err
			}
			if !ok {
				return CreateResult{}, catalog.Perr(foldtype.CodeBadRequest, "fork offset is not a record boundary of the source")
			}
		}
		if req.ForkSubOffset > 0 {
			prefix, err = splitRecord(t.Context(), t.Driver(), src, forkOffset, req.ForkSubOffset)
			if err != nil {
				return CreateResult{}, err
			}
		}
	} else if req.HasForkOffset || req.ForkSubOffset > 0 {
		return CreateResult{}, heldOr(fresh, catalog.Perr(foldtype.CodeBadRequest, "fork offsets need a fork source"))
	}

	nowMs := now.UnixMilli()
	row := driver.Stream{Path: req.Path, ContentType: req.ContentType, CreatedMs: nowMs, LastAccessMs: nowMs,
		ForkOffset: forkOffset, ForkSubOffset: req.ForkSubOffset, BaseTail: forkOffset}
	if req.HasTTL {
		row.TTLSeconds = sql.NullInt64{Int64: req.TTLSeconds, Valid: true}
	}
	if !req.ExpiresAt.IsZero() {
		row.ExpiresAtMs = sql.NullInt64{Int64: req.ExpiresAt.UnixMilli(), Valid: true}
	}
	if src != nil {
		row.ForkedFrom = sql.NullInt64{Int64: src.ID, Valid: true}
	}
	var id int64
	if fresh {
		var inserted bool
		if len(req.Body) == 0 && !req.Closed && prefix == nil {
			// The insert is all this create writes: one statement needs no savepoint.
			id, inserted, err = t.InsertStreamAlone(row)
		} else {
			id, inserted, err = t.InsertStreamIfAbsent(row)
		}
		if err == nil && !inserted {
			return CreateResult{}, errPathHeld // taken, or the driver cannot tell: nothing written
		}
	} else {
		id, err = t.Driver().InsertStream(t.Context(), row)
	}
	if err != nil {
		return CreateResult{}, fmt.Errorf("create stream: %w", err)
	}
	row.ID = id
	m := &kernel.StreamState{Row: row, HighestAssigned: forkOffset, Tail: forkOffset}
	t.Create(m)
	t.AfterCommit(func() { p.c.ForgetAccess(id) })
	p.c.Created(t, req.Path)
	if prefix != nil {
		prefix.StreamID = id
		if err := t.Driver().InsertRecord(t.Context(), *prefix); err != nil {
			return CreateResult{}, fmt.Errorf("create fork: %w", err)
		}
		m.Tail, m.HighestAssigned = prefix.End, prefix.End
	}
	if src != nil && m.Tail > 0 && isJSON && len(msgs) == 0 {
		// A fork lands the source's messages up to its fork point (and a split record's prefix)
		// on a new path: the commit watchers hear of it as of any append (a body's append below
		// tells them itself). Other nodes hear of it through the notification of the staged
		// stream.
		path := req.Path
		t.AfterCommit(func() { p.k.Landed().Notify(path) })
	}
	if isJSON {
		if len(msgs) > 0 {
			if err := p.appendMessages(t, m, msgs); err != nil {
				return CreateResult{}, err
			}
		}
	} else if len(req.Body) > 0 {
		if err := t.WriteBytes(m, req.Body); err != nil {
			return CreateResult{}, err
		}
	}
	if req.Closed {
		if err := t.Driver().UpdateStream(t.Context(), id, driver.StreamUpdate{Close: &driver.ClosedBy{}}); err != nil {
			return CreateResult{}, fmt.Errorf("create stream: %w", err)
		}
		m.Row.Closed = true
	}
	info := m.Row
	info.Tail = m.Tail
	return CreateResult{Created: true, Info: catalog.InfoOf(&info)}, nil
}

// heldOr is err, or errPathHeld for an unread create (a stream at the path could answer
// otherwise).
func heldOr(fresh bool, err error) error {
	if fresh {
		return errPathHeld
	}
	return err
}

// isBoundary reports whether position off of stream src ends a message (JSON streams) or a record
// (byte streams), so a fork may start there.
func isBoundary(ctx context.Context, q driver.Reader, src *driver.Stream, off int64) (bool, error) {
	ok := false
	var err error
	if kernel.IsJSONContentType(src.ContentType) {
		err = kernel.ScanMessages(ctx, q, src, off-1, func(m kernel.Message) bool { ok = m.Offset == off; return false })
	} else {
		err = kernel.ScanMessages(ctx, q, src, off, func(m kernel.Message) bool { ok = m.RecordStart == off && m.Start == off; return false })
	}
	return ok, err
}

// sameConfig compares an existing stream with a create request (docs/store.md#forks): media type,
// TTL, expiry, closure and, for forks, source and fork point.
func sameConfig(r *driver.Stream, src *driver.Stream, req CreateRequest) bool {
	if kernel.MediaType(r.ContentType) != kernel.MediaType(req.ContentType) {
		return false
	}
	if r.TTLSeconds.Valid != req.HasTTL || (req.HasTTL && r.TTLSeconds.Int64 != req.TTLSeconds) {
		return false
	}
	if r.ExpiresAtMs.Valid != !req.ExpiresAt.IsZero() || (r.ExpiresAtMs.Valid && r.ExpiresAtMs.Int64 != req.ExpiresAt.UnixMilli()) {
		return false
	}
	if r.Closed != req.Closed {
		return false
	}
	if (src == nil) != !r.ForkedFrom.Valid {
		return false
	}
	if src != nil {
		if r.ForkedFrom.Int64 != src.ID {
			return false
		}
		if req.HasForkOffset && r.ForkOffset != req.ForkOffset {
			return false
		}
		if r.ForkSubOffset != req.ForkSubOffset {
			return false
		}
	}
	return true
}

// splitRecord returns, as the record a fork owns, the first sub bytes (byte streams) or messages
// (JSON streams) of the record that starts at position at in stream src (docs/store.md#forks).
func splitRecord(ctx context.Context, q driver.Reader, src *driver.Stream, at, sub int64) (*driver.Record, error) {
	rec := &driver.Record{RecordStart: at, Start: at}
	isJSON := kernel.IsJSONContentType(src.ContentType)
	var n int64
	prev := at
	err := kernel.ScanMessages(ctx, q, src, at, func(m kernel.Message) bool {
		if m.RecordStart != at || n >= sub {
			return false
		}
		rec.CreatedMs = m.CreatedMs
		if isJSON {
			if n > 0 {
				rec.Body = append(rec.Body, ',')
			}
			rec.Frames = driver.AppendFrame(rec.Frames, m.Offset-prev, len(m.Body))
			rec.Body = append(rec.Body, m.Body...)
			prev, rec.End = m.Offset, m.Offset
			n++
			return true
		}
		take := min(int64(len(m.Body)), sub-n)
		rec.Body = append(rec.Body, m.Body[:take]...)
		n += take
		rec.End = at + n
		return n < sub
	})
	if err != nil {
		return nil, err
	}
	if n != sub {
		return nil, catalog.Perr(foldtype.CodeBadRequest, "fork sub-offset %d is past the end of the record at that offset", sub)
	}
	return rec, nil
}

// AppendRecord appends a record and/or closes the stream, running the checks and the producer
// decision table (docs/store.md#idempotent-producers) in one transaction with the data.
func (p *Protocol) AppendRecord(ctx context.Context, req AppendRequest) (AppendResult, error) {
	if req.Producer != nil {
		if err := catalog.ValidateProducerID(req.Producer.ID); err != nil {
			return AppendResult{}, err
		}
	}
	// Parse JSON outside the writer when the request says JSON; the writer only uses it if the
	// stream is JSON too (the content types must match).
	var msgs []rawjson.Message
	var msgErr error
	if len(req.Body) > 0 && kernel.IsJSONContentType(req.ContentType) {
		msgs, msgErr = splitJSON(req.Body, false, req.Provenance)
		if msgErr == nil {
			if err := p.c.CheckMessages(req.Path, msgs); err != nil {
				return AppendResult{}, err
			}
		}
	}
	// A producer's pipelined requests may arrive out of order: seq 3 can reach the writer before
	// seq 2. Rather than answer a sequence gap at once (which costs the client a round trip and a
	// resend), the later request waits for commits to the stream and tries again: as long as a
	// missing seq is arriving (inflight.go), else up to Config.ProducerReorderWait; a gap that is
	// still there after the wait is answered as usual (docs/store.md#idempotent-producers).
	if r := p.planSliced(req, msgs, msgErr); r != nil {
		if res, ok, err := p.appendSliced(ctx, req, msgs, msgErr, r); ok {
			return res, err
		}
	}
	var deadline time.Time
	renewals := 0
	for {
		var res AppendResult
		var gapWake <-chan struct{}
		err := p.k.WriteTo(ctx, req.Path, func(t *kernel.Tx) error {
			gapWake = nil // a discarded earlier run may have set it (see kernel.Store.Write)
			var err error
			var gapStream int64
			res, err = p.appendTx(t, req, msgs, msgErr, &gapStream)
			if gapStream != 0 && errors.Is(err, foldtype.ErrSequenceGap) {
				// Taken on the writer goroutine, after this write's reads: every later commit
				// touching the stream closes it, so the retry cannot miss the missing seq.
				gapWake = p.k.Changed(gapStream)
			}
			return err
		})
		if gapWake == nil {
			return res, err
		}
		// The wait runs on the store's clock, so tests drive it with a fake one.
		if deadline.IsZero() {
			deadline = p.clock.Now().Add(p.reorderWait)
		}
		wait := deadline.Sub(p.clock.Now())
		if wait <= 0 {
			return res, err
		}
		expired := make(chan struct{})
		stop := p.clock.AfterFunc(wait, func() { close(expired) })
		select {
		case <-gapWake:
			stop()
		case <-expired:
			// The wait ran out: the gap is answered, unless a missing seq is still arriving
			// (inflight.go); then the wait is renewed, up to maxArrivingWait in all.
			expected, ok := catalog.DataInt64(err, DataExpectedSeq)
			if !ok || renewals >= int(maxArrivingWait/p.reorderWait) ||
				!p.anyArriving(req.Path, req.Producer.ID, req.Producer.Epoch, expected, req.Producer.Seq) {
				return res, err
			}
			renewals++
			deadline = p.clock.Now().Add(p.reorderWait)
		case <-ctx.Done():
			stop()
			return res, err
		}
	}
}

// DefaultProducerReorderWait is the default of Config.ProducerReorderWait: long enough for a
// pipelined request that overtook its predecessor on loopback or a LAN even on a loaded machine
// (where the predecessor's connection may not be served for tens of milliseconds), short enough
// that a real gap — a lost request, which its producer resends anyway — is still answered promptly.
const DefaultProducerReorderWait = 200 * time.Millisecond

// appendTx runs one protocol append inside the writer. On a sequence gap it sets *gapStream to the
// stream's id, so AppendRecord can wait for the missing seqs.
func (p *Protocol) appendTx(t *kernel.Tx, req AppendRequest, msgs []rawjson.Message, msgErr error, gapStream *int64) (AppendResult, error) {
	now := t.Now()
	m, err := p.c.LiveStream(t, req.Path)
	if err != nil {
		return AppendResult{}, err
	}
	r := &m.Row
	closeOnly := req.Close && len(req.Body) == 0
	pr := req.Producer

	// Every POST renews a sliding TTL, even one refused below (docs/store.md#ttl-and-expiry): the
	// access is noted in memory, which no rollback undoes; an accepted POST also persists it with
	// its data.
	p.c.NoteAccess(r, now)

	var st driver.Producer
	known := false
	if pr != nil {
		st, known, err = t.Producer(m, pr.ID)
		if err != nil {
			return AppendResult{}, err
		}
	}

	if r.Closed {
		if pr != nil && r.ClosedByProducer.Valid && r.ClosedByProducer.String == pr.ID &&
			r.ClosedByEpoch.Int64 == pr.Epoch && r.ClosedBySeq.Int64 == pr.Seq {
			return AppendResult{Tail: m.Tail, Closed: true, Duplicate: true, Epoch: pr.Epoch, Seq: pr.Seq}, nil
		}
		if pr != nil && known && pr.Epoch < st.Epoch {
			return AppendResult{}, catalog.StaleEpochError(st.Epoch)
		}
		if closeOnly && pr == nil {
			return AppendResult{Tail: m.Tail, Closed: true}, nil
		}
		return AppendResult{}, catalog.StreamClosedError(r.Path, m.Tail)
	}

	if !closeOnly && kernel.MediaType(req.ContentType) != kernel.MediaType(r.ContentType) {
		return AppendResult{}, catalog.Perr(foldtype.CodeConflict, "content type %q does not match the stream's %q", req.ContentType, r.ContentType)
	}

	// The producer decision table (docs/store.md#idempotent-producers). Validation proposes;
	// nothing changes until the data is in.
	if pr != nil {
		switch {
		case !known:
			if pr.Seq != 0 {
				*gapStream = r.ID
				return AppendResult{}, catalog.SequenceGapError(0, pr.Seq)
			}
		case pr.Epoch < st.Epoch:
			return AppendResult{}, catalog.StaleEpochError(st.Epoch)
		case pr.Epoch > st.Epoch:
			if pr.Seq != 0 {
				return AppendResult{}, catalog.Perr(foldtype.CodeBadRequest, "a new producer epoch must start at seq 0")
			}
		case pr.Seq <= st.LastSeq:
			return AppendResult{Tail: m.Tail, Duplicate: true, Epoch: st.Epoch, Seq: st.LastSeq}, nil
		case pr.Seq > st.LastSeq+1:
			*gapStream = r.ID
			return AppendResult{}, catalog.SequenceGapError(st.LastSeq+1, pr.Seq)
		}
	}

	if req.StreamSeq != "" && r.StreamSeq.Valid && req.StreamSeq <= r.StreamSeq.String {
		return AppendResult{}, catalog.Perr(foldtype.CodeConflict, "Stream-Seq %q is not greater than the last one %q", req.StreamSeq, r.StreamSeq.String)
	}
	if req.HasExpectedTail && req.ExpectedTail != m.Tail {
		e := foldtype.OffsetConflictError(req.ExpectedTail, m.Tail)
		e.Data[DataTail] = m.Tail
		return AppendResult{}, e
	}

	if !closeOnly {
		if kernel.IsJSONContentType(r.ContentType) {
			if msgErr != nil {
				return AppendResult{}, msgErr
			}
			if msgs == nil { // the request's content type matched without selecting JSON: cannot happen
				if msgs, err = splitJSON(req.Body, false, req.Provenance); err != nil {
					return AppendResult{}, err
				}
			}
			if err := p.appendMessagesOf(t, m, msgs, req.Body); err != nil {
				return AppendResult{}, err
			}
		} else if err := t.WriteBytes(m, req.Body); err != nil {
			return AppendResult{}, err
		}
	}

	res := AppendResult{Tail: m.Tail, Closed: req.Close}
	if pr != nil {
		if err := t.PutProducer(m, driver.Producer{ID: pr.ID, Epoch: pr.Epoch, LastSeq: pr.Seq, UpdatedMs: now.UnixMilli()}); err != nil {
			return AppendResult{}, err
		}
		res.Epoch, res.Seq = pr.Epoch, pr.Seq
	}
	// The stream row changes only for what the request sets: Stream-Seq, closure, and the last
	// access of a stream with a sliding TTL. A plain append writes only its record.
	var u driver.StreamUpdate
	if req.StreamSeq != "" {
		u.StreamSeq = &req.StreamSeq
	}
	if req.Close {
		by := &driver.ClosedBy{}
		if pr != nil {
			by = &driver.ClosedBy{Producer: pr.ID, Epoch: pr.Epoch, Seq: pr.Seq}
		}
		u.Close = by
	}
	if u.StreamSeq != nil || u.Close != nil {
		if err := t.Driver().UpdateStream(t.Context(), r.ID, u); err != nil {
			return AppendResult{}, fmt.Errorf("append: %w", err)
		}
		if u.StreamSeq != nil {
			r.StreamSeq = sql.NullString{String: req.StreamSeq, Valid: true}
		}
		if c := u.Close; c != nil {
			r.Closed = true
			if c.Producer != "" {
				r.ClosedByProducer = sql.NullString{String: c.Producer, Valid: true}
				r.ClosedByEpoch = sql.NullInt64{Int64: c.Epoch, Valid: true}
				r.ClosedBySeq = sql.NullInt64{Int64: c.Seq, Valid: true}
			}
		}
	}
	t.PersistAccess(m)
	t.Changed(r.ID, r.Path)
	return res, nil
}

// appendMessages appends a protocol record of JSON messages through the one insert path:
// event-shaped messages with an idempotency key are checked like event-view appends (a duplicate
// is dropped, a different body refuses the record), the rest are stored as they are.
func (p *Protocol) appendMessages(t *kernel.Tx, m *kernel.StreamState, msgs []rawjson.Message) error {
	return p.appendMessagesOf(t, m, msgs, nil)
}

// appendMessagesOf is appendMessages for messages split from body (nil: unknown): when msgs are
// the elements of body's top-level array as they stand, the record is stored from the body's
// text without joining the messages again.
func (p *Protocol) appendMessagesOf(t *kernel.Tx, m *kernel.StreamState, msgs []rawjson.Message, body []byte) error {
	batch := make([]kernel.Pending, len(msgs))
	// A huge record written in slices was checked for keys before its first slice (package sliced).
	inSlices := sliced.Writing(t, m.Row.ID)
	for i := range msgs {
		msg := &msgs[i]
		if inSlices {
			batch[i] = kernel.Pending{Body: msg.Raw, Scanned: msg}
			continue
		}
		batch[i] = kernel.Pending{Body: msg.Raw, Scanned: msg}
		if in, key := eventKeyOf(msg); key != "" {
			probe := in // on the heap only for a message with a key
			batch[i].Key, batch[i].Probe = key, &probe
		}
		batch[i].Ctl, batch[i].Reason = controlOfMessage(msg)
	}
	adm, after, through, err := t.Admit(m, batch)
	if err != nil {
		return err
	}
	if through == after {
		return nil // every message was a duplicate
	}
	if err := t.WriteRecord(m, batch, adm, after, through, arrayText(body)); err != nil {
		return err
	}
	// Hand the messages to the event face's subscribers (processors) once committed, through the
	// hooks it registered with the catalogue (catalog.Hooks.Listening, catalog.Hooks.Publish),
	// decoded exactly as the event face reads them — decoded only when someone on this node
	// subscribes.
	// The commit watchers hear of every such commit either way (docs/store.md#commit-watchers).
	path := m.Row.Path
	createdMs := t.Now().UnixMilli()
	if ms, ok := sliced.CreatedMs(t, m.Row.ID); ok {
		createdMs = ms // stored as the time its first slice was written
	}
	t.AfterCommit(func() {
		if !p.c.Listening(path) {
			// Nobody here takes the events: they are not decoded, but the commit watchers (a
			// host opening pattern processors' engines) need only the path.
			p.k.Landed().Notify(path)
			return
		}
		events := make([]foldtype.Event, 0, len(batch))
		for i, b := range batch {
			if adm[i].Dup {
				continue
			}
			if b.Scanned != nil {
				events = append(events, catalog.EventOf(path, adm[i].Offset, createdMs, b.Scanned, b.Body))
			} else if ev, err := catalog.DecodeEvent(path, kernel.Message{Offset: adm[i].Offset, CreatedMs: createdMs, Body: b.Body}); err == nil {
				events = append(events, ev)
			}
		}
		p.c.Publish(path, events, after, through)
	})
	return nil
}

// eventKeyOf returns the idempotency key of an event-shaped message (a JSON object with a string
// "type" and a non-empty string "idempotencyKey", read by their exact names as the event view
// reads them), or "". As a decoding into string fields would, a message where any occurrence of
// either member is neither a string nor null has none.
func eventKeyOf(msg *rawjson.Message) (foldtype.EventInput, string) {
	if msg.Raw[0] != '{' {
		return foldtype.EventInput{}, ""
	}
	t, k := msg.Member(catalog.MType), msg.Member(catalog.MKey)
	if k.Kinds == 0 || !stringOrNull(t.Kinds) || !stringOrNull(k.Kinds) {
		return foldtype.EventInput{}, ""
	}
	typ, ok := t.String()
	if !ok {
		return foldtype.EventInput{}, ""
	}
	key, _ := k.String()
	if key == "" {
		return foldtype.EventInput{}, ""
	}
	return foldtype.EventInput{Type: typ, Payload: msg.Member(catalog.MPayload).Value, Metadata: msg.Member(catalog.MMetadata).Value}, key
}

// stringOrNull reports whether every occurrence of a member is a string or null.
func stringOrNull(k rawjson.Kind) bool { return k&^(rawjson.KindString|rawjson.KindNull) == 0 }

// arrayText returns a JSON array body's text inside its brackets (nil for any other body). The
// body must be well-formed JSON.
func arrayText(body []byte) []byte {
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '[' {
		return nil
	}
	return body[1 : len(body)-1]
}

// controlMarker is in every message that names a control type without JSON escapes.
var controlMarker = []byte("events.iterate.com/stream/")

// controlOfMessage classifies a protocol message as a control event, from its members as the
// body's one scan found them. A type without escapes that does not start with the control prefix
// cannot name a control type, so most messages cost a prefix comparison.
func controlOfMessage(msg *rawjson.Message) (foldtype.ControlKind, string) {
	if msg.Raw[0] != '{' {
		return foldtype.ControlNone, ""
	}
	t := msg.Member(catalog.MType)
	if t.Kinds == 0 || (bytes.IndexByte(t.Value, '\\') < 0 && !bytes.HasPrefix(t.Value[1:], controlMarker)) {
		return foldtype.ControlNone, ""
	}
	// As a decoding into typed fields would, a wrong kind of "type" or "ephemeral" anywhere in the
	// message makes it no control event.
	if !stringOrNull(t.Kinds) || msg.Member(catalog.MEphemeral).Kinds&^(rawjson.KindBool|rawjson.KindNull) != 0 {
		return foldtype.ControlNone, ""
	}
	typ, ok := t.String()
	if !ok {
		return foldtype.ControlNone, ""
	}
	return foldtype.ParseControl(typ, msg.Member(catalog.MPayload).Value, false)
}

// AppendJSON appends body, a JSON array of messages, to the live JSON stream at path as one record
// in the write t, as a protocol append of p with no producer and no precondition would: the
// store's subscription face appends its wake events this way (stream.SubscriptionTx.AppendJSON).
// An error splitting the body is not a refusal and has no code. A function, not a method, so that
// stream.Protocol offers the store's callers only the protocol's operations.
func AppendJSON(p *Protocol, t *kernel.Tx, path string, body []byte) error {
	msgs, err := splitJSON(body, false, nil)
	if err != nil {
		return fmt.Errorf("not a JSON array of messages: %v", err) // not a refusal: no code
	}
	var gap int64
	_, err = p.appendTx(t, AppendRequest{Path: path, ContentType: "application/json", Body: body}, msgs, nil, &gap)
	return err
}
