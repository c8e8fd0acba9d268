package stream

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// DefaultContentType is the content type of a stream created without one.
const DefaultContentType = "application/octet-stream"

// CreateRequest asks to create (or idempotently ensure) a stream (spec §5, §14).
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
}

// CreateResult is the outcome of CreateStream.
type CreateResult struct {
	// Created is true when a new stream was made (201), false for an identical existing one (200).
	Created bool
	// Info is the stream's metadata after the request.
	Info StreamInfo
}

// ProducerHeaders identify one request of an idempotent producer (spec §20).
type ProducerHeaders struct {
	// ID names the producer; non-empty.
	ID string
	// Epoch is the producer's epoch.
	Epoch int64
	// Seq is the request's sequence number within the epoch.
	Seq int64
}

// AppendRequest asks to append a record, optionally closing the stream (spec §6, §7).
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

// FlattenJSON validates a JSON body and flattens a top-level array one level (spec §13),
// returning each message compactly re-serialised. An empty array is refused unless allowEmpty.
func FlattenJSON(body []byte, allowEmpty bool) ([][]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, perr(foldstream.CodeBadRequest, "body is not valid JSON")
	}
	if !json.Valid(trimmed) {
		return nil, perr(foldstream.CodeBadRequest, "body is not valid JSON")
	}
	var raws [][]byte
	if trimmed[0] == '[' {
		raws = splitArray(trimmed)
		if len(raws) == 0 && !allowEmpty {
			return nil, perr(foldstream.CodeBadRequest, "an empty JSON array appends nothing; send at least one message")
		}
		if len(raws) > MaxMessagesPerRecord {
			return nil, perr(foldstream.CodeTooLarge, "a JSON array of %d messages is over the limit of %d per request; split it", len(raws), MaxMessagesPerRecord)
		}
	} else {
		raws = [][]byte{trimmed}
	}
	out := make([][]byte, len(raws))
	for i, r := range raws {
		if bytes.IndexAny(r, " \t\r\n") < 0 {
			out[i] = r // already compact (the common case for machine-written JSON)
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, r); err != nil {
			return nil, perr(foldstream.CodeBadRequest, "body is not valid JSON")
		}
		out[i] = b.Bytes()
	}
	return out, nil
}

// CreateStream creates a stream, or confirms an identical existing one.
func (s *Store) CreateStream(ctx context.Context, req CreateRequest) (CreateResult, error) {
	if req.HasTTL && !req.ExpiresAt.IsZero() {
		return CreateResult{}, perr(foldstream.CodeBadRequest, "give a TTL or an expiry time, not both")
	}
	if req.HasTTL && req.TTLSeconds <= 0 {
		return CreateResult{}, perr(foldstream.CodeBadRequest, "a TTL must be at least one second, not %d", req.TTLSeconds)
	}
	var res CreateResult
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		res, err = s.create(tx, req)
		return err
	})
	return res, err
}

func (s *Store) create(tx *Tx, req CreateRequest) (CreateResult, error) {
	now := tx.Now()
	existing, err := loadStreamByPath(tx, req.Path)
	if err != nil && !errors.Is(err, errNoStream) {
		return CreateResult{}, err
	}
	if existing != nil {
		lv, err := s.judge(tx, existing, now)
		if err != nil {
			return CreateResult{}, err
		}
		switch lv {
		case streamGone:
			return CreateResult{}, perr(foldstream.CodeConflict, "stream %s is deleted but its forks still use the path", quotePath(req.Path))
		case streamMissing:
			if err := s.hardDelete(tx, existing); err != nil {
				return CreateResult{}, err
			}
			existing = nil
		}
	}

	if !req.ExpiresAt.IsZero() && !req.ExpiresAt.After(now) {
		return CreateResult{}, perr(foldstream.CodeBadRequest, "the expiry time %s has already passed",
			req.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}

	// Resolve the fork source and inherited settings.
	var src *streamRow
	if req.ForkedFrom != "" {
		src, err = s.loadLive(tx, req.ForkedFrom, now)
		if err != nil {
			if errors.Is(err, foldstream.ErrStreamGone) {
				return CreateResult{}, perr(foldstream.CodeConflict, "fork source %s is deleted", quotePath(req.ForkedFrom))
			}
			return CreateResult{}, err
		}
		if req.ContentType == "" {
			req.ContentType = src.ContentType
		} else if MediaType(req.ContentType) != MediaType(src.ContentType) {
			return CreateResult{}, perr(foldstream.CodeConflict, "fork content type %q differs from the source's %q", req.ContentType, src.ContentType)
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
		if err := ValidateStreamName(req.Path); err != nil {
			return CreateResult{}, err
		}
	}

	if existing != nil {
		if !sameConfig(existing, src, req) {
			return CreateResult{}, perr(foldstream.CodeConflict, "stream %s already exists with a different configuration", quotePath(req.Path))
		}
		return CreateResult{Created: false, Info: infoOf(existing)}, nil
	}

	isJSON := IsJSONContentType(req.ContentType)
	var msgs [][]byte
	if isJSON && len(bytes.TrimSpace(req.Body)) > 0 {
		if msgs, err = FlattenJSON(req.Body, true); err != nil {
			return CreateResult{}, err
		}
	}

	// Fork point and the materialised prefix of a split record.
	var forkOffset int64
	var prefix []entry
	if src != nil {
		forkOffset = src.Tail
		if req.HasForkOffset {
			forkOffset = req.ForkOffset
		}
		if forkOffset < 0 || forkOffset > src.Tail {
			return CreateResult{}, perr(foldstream.CodeBadRequest, "fork offset is past the source's tail")
		}
		// The tail is always a boundary, even with no entry ending there: an event batch ending
		// with an ephemeral moves the durable mark to the ephemeral's offset, which has no row.
		if forkOffset > 0 && forkOffset < src.Tail {
			at, _, err := readEntries(tx, src, forkOffset-1, 1, 1)
			if err != nil {
				return CreateResult{}, err
			}
			if len(at) == 0 || at[0].Offset != forkOffset {
				return CreateResult{}, perr(foldstream.CodeBadRequest, "fork offset is not a record boundary of the source")
			}
		}
		if req.ForkSubOffset > 0 {
			prefix, err = splitRecord(tx, src, forkOffset, req.ForkSubOffset, IsJSONContentType(src.ContentType))
			if err != nil {
				return CreateResult{}, err
			}
		}
	} else if req.HasForkOffset || req.ForkSubOffset > 0 {
		return CreateResult{}, perr(foldstream.CodeBadRequest, "fork offsets need a fork source")
	}

	var ttl, expires sql.NullInt64
	if req.HasTTL {
		ttl = sql.NullInt64{Int64: req.TTLSeconds, Valid: true}
	}
	if !req.ExpiresAt.IsZero() {
		expires = sql.NullInt64{Int64: req.ExpiresAt.UnixMilli(), Valid: true}
	}
	var forkedFrom sql.NullInt64
	if src != nil {
		forkedFrom = sql.NullInt64{Int64: src.ID, Valid: true}
	}
	tail := forkOffset
	if len(prefix) > 0 {
		tail = prefix[len(prefix)-1].Offset
	}
	nowMs := now.UnixMilli()
	res, err := tx.Exec(`INSERT INTO streams(path, content_type, created_ms, ttl_seconds, expires_at_ms, last_access_ms,
		forked_from, fork_offset, fork_sub_offset, tail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		req.Path, req.ContentType, nowMs, ttl, expires, nowMs, forkedFrom, forkOffset, req.ForkSubOffset, tail)
	if err != nil {
		return CreateResult{}, fmt.Errorf("create stream: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return CreateResult{}, fmt.Errorf("create stream: %w", err)
	}
	for _, e := range prefix {
		if _, err := tx.Exec(`INSERT INTO entries(stream_id, offset, record_start, created_ms, body) VALUES (?, ?, ?, ?, ?)`,
			id, e.Offset, forkOffset, e.CreatedMs, e.Body); err != nil {
			return CreateResult{}, fmt.Errorf("create fork: %w", err)
		}
	}
	row, err := loadStreamByID(tx, id)
	if err != nil {
		return CreateResult{}, err
	}
	// A re-created path may reuse the id of a deleted stream: start from fresh writer state.
	m := &streamMem{HighestAssigned: row.Tail, Tail: row.Tail}
	tx.staged[id] = m
	tx.touched[id] = true
	tx.AfterCommit(func() { s.forgetAccess(id) })
	s.streamCreated(tx, req.Path)
	if isJSON {
		if len(msgs) > 0 {
			if err := s.insertRecord(tx, row, m, msgs, nil, now); err != nil {
				return CreateResult{}, err
			}
		}
	} else if len(req.Body) > 0 {
		if err := s.insertRecord(tx, row, m, nil, req.Body, now); err != nil {
			return CreateResult{}, err
		}
	}
	if m.Tail != row.Tail || req.Closed {
		if _, err := tx.Exec(`UPDATE streams SET tail = ?, closed = ? WHERE id = ?`, m.Tail, req.Closed, id); err != nil {
			return CreateResult{}, fmt.Errorf("create stream: %w", err)
		}
	}
	row, err = loadStreamByID(tx, id)
	if err != nil {
		return CreateResult{}, err
	}
	return CreateResult{Created: true, Info: infoOf(row)}, nil
}

// sameConfig compares an existing stream with a create request (spec §5): media type, TTL,
// expiry, closure and, for forks, source and fork point.
func sameConfig(r *streamRow, src *streamRow, req CreateRequest) bool {
	if MediaType(r.ContentType) != MediaType(req.ContentType) {
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

// splitRecord returns the first sub bytes (byte streams) or messages (JSON streams) of the record
// that starts at position at in stream src, as the entries a fork owns (spec §14).
func splitRecord(q querier, src *streamRow, at, sub int64, isJSON bool) ([]entry, error) {
	if isJSON {
		rows, _, err := readEntries(q, src, at, int(min(sub, 1<<20)), 1<<62)
		if err != nil {
			return nil, err
		}
		var out []entry
		for _, e := range rows {
			if e.RecordStart != at {
				break
			}
			out = append(out, e)
		}
		if int64(len(out)) != sub {
			return nil, perr(foldstream.CodeBadRequest, "fork sub-offset %d is past the end of the record at that offset", sub)
		}
		return out, nil
	}
	rows, _, err := readEntries(q, src, at, 1, 1<<62)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || rows[0].RecordStart != at || int64(len(rows[0].Body)) < sub {
		return nil, perr(foldstream.CodeBadRequest, "fork sub-offset %d is past the end of the record at that offset", sub)
	}
	e := rows[0]
	return []entry{{Offset: at + sub, RecordStart: at, CreatedMs: e.CreatedMs, Body: e.Body[:sub]}}, nil
}

// splitArray returns the elements of a valid JSON array (whitespace around them trimmed) in one
// pass: it tracks nesting depth and strings, and cuts at the commas of depth one.
func splitArray(arr []byte) [][]byte {
	var out [][]byte
	depth, start := 0, -1
	inString, escaped := false, false
	for i, c := range arr {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && start < 0 {
				start = i
			}
		case '[', '{':
			depth++
			if depth == 2 && start < 0 {
				start = i
			}
		case ']', '}':
			if depth == 1 { // the closing bracket of the array
				if start >= 0 {
					out = append(out, bytes.TrimSpace(arr[start:i]))
				}
				return out
			}
			depth--
		case ',':
			if depth == 1 {
				out = append(out, bytes.TrimSpace(arr[start:i]))
				start = -1
			}
		case ' ', '\t', '\r', '\n':
		default:
			if depth == 1 && start < 0 {
				start = i
			}
		}
	}
	return out
}

// insertRecord stores one record (JSON messages, or a byte body) at the stream's tail and advances
// the staged writer state; the caller writes the new tail (m.Tail) to the stream's row. keys holds each message's idempotency key ("" for none).
func (s *Store) insertRecord(tx *Tx, r *streamRow, m *streamMem, msgs [][]byte, body []byte, now time.Time, keys ...string) error {
	start := m.Tail
	nowMs := now.UnixMilli()
	if msgs != nil {
		if len(msgs) == 0 {
			return nil
		}
		after := max(m.Tail, m.HighestAssigned)
		if err := insertMessages(tx, r.ID, after, start, nowMs, msgs, keys); err != nil {
			return err
		}
		next := after + int64(len(msgs))
		// Hand the messages to the event view's subscribers (processors) once committed, decoded
		// exactly as the event view reads them — only when someone listens.
		path := r.Path
		tx.AfterCommit(func() {
			s.ev.subsMu.RLock()
			listening := len(s.ev.subs[path]) > 0
			s.ev.subsMu.RUnlock()
			if !listening {
				return
			}
			events := make([]foldstream.Event, 0, len(msgs))
			for i, msg := range msgs {
				e := entry{Offset: after + int64(i) + 1, RecordStart: start, CreatedMs: nowMs, Body: msg}
				if i < len(keys) && keys[i] != "" {
					e.IdempotencyKey = sql.NullString{String: keys[i], Valid: true}
				}
				if ev, err := decodeEvent(path, e); err == nil {
					events = append(events, ev)
				}
			}
			s.publish(path, events, after, next)
		})
		m.HighestAssigned, m.Tail = next, next
	} else if len(body) > 0 {
		end := m.Tail + int64(len(body))
		if _, err := tx.Exec(`INSERT INTO entries(stream_id, offset, record_start, created_ms, body) VALUES (?, ?, ?, ?, ?)`,
			r.ID, end, start, nowMs, body); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		m.HighestAssigned, m.Tail = max(m.HighestAssigned, end), end
	}
	tx.Touch(r.ID)
	return nil
}

// insertMessages writes JSON messages at offsets after+1, after+2, …, many rows per statement.
func insertMessages(tx *Tx, id, after, recordStart, createdMs int64, msgs [][]byte, keys []string) error {
	const perStmt = 100
	var sb strings.Builder
	args := make([]any, 0, perStmt*6)
	for lo := 0; lo < len(msgs); lo += perStmt {
		hi := min(lo+perStmt, len(msgs))
		sb.Reset()
		args = args[:0]
		sb.WriteString(`INSERT INTO entries(stream_id, offset, record_start, created_ms, idempotency_key, body) VALUES `)
		for i := lo; i < hi; i++ {
			if i > lo {
				sb.WriteByte(',')
			}
			sb.WriteString(`(?,?,?,?,?,?)`)
			var key any
			if i < len(keys) && keys[i] != "" {
				key = keys[i]
			}
			args = append(args, id, after+int64(i)+1, recordStart, createdMs, key, msgs[i])
		}
		if _, err := tx.Exec(sb.String(), args...); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	}
	return nil
}

// AppendRecord appends a record and/or closes the stream, running the checks of spec §6 and the
// producer decision table of §20 in one transaction with the data.
func (s *Store) AppendRecord(ctx context.Context, req AppendRequest) (AppendResult, error) {
	if req.Producer != nil {
		if err := validateProducerID(req.Producer.ID); err != nil {
			return AppendResult{}, err
		}
	}
	// Parse JSON outside the writer when the request says JSON; the writer only uses it if the
	// stream is JSON too (the content types must match).
	var msgs [][]byte
	var msgErr error
	if len(req.Body) > 0 && IsJSONContentType(req.ContentType) {
		msgs, msgErr = FlattenJSON(req.Body, false)
	}
	// A producer's pipelined requests may arrive out of order: seq 3 can reach the writer before
	// seq 2. Rather than answer a sequence gap at once (which costs the client a round trip and a
	// resend), the later request waits up to Options.ProducerReorderWait for commits to the stream and
	// tries again; a gap that is still there after the wait is answered as usual (spec §20.2).
	var deadline time.Time
	for {
		var res AppendResult
		var gapWake <-chan struct{}
		err := s.write(ctx, func(tx *Tx) error {
			var err error
			var gapStream int64
			res, err = s.appendTx(tx, req, msgs, msgErr, &gapStream)
			if gapStream != 0 && errors.Is(err, foldstream.ErrSequenceGap) {
				// Taken on the writer goroutine, after this write's reads: every later commit
				// touching the stream closes it, so the retry cannot miss the missing seq.
				gapWake = s.changed(gapStream)
			}
			return err
		})
		if gapWake == nil {
			return res, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(s.opts.ProducerReorderWait)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return res, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-gapWake:
			timer.Stop()
		case <-timer.C:
			return res, err
		case <-ctx.Done():
			timer.Stop()
			return res, err
		}
	}
}

// DefaultProducerReorderWait is the default of Options.ProducerReorderWait: long enough for a
// pipelined request that overtook its predecessor on loopback or a LAN, short enough that a real
// gap is still answered promptly.
const DefaultProducerReorderWait = 25 * time.Millisecond

// appendTx runs one protocol append inside the writer. On a sequence gap it sets *gapStream to the
// stream's id, so AppendRecord can wait for the missing seqs.
func (s *Store) appendTx(tx *Tx, req AppendRequest, msgs [][]byte, msgErr error, gapStream *int64) (AppendResult, error) {
	now := tx.Now()
	r, err := s.loadLive(tx, req.Path, now)
	if err != nil {
		return AppendResult{}, err
	}
	closeOnly := req.Close && len(req.Body) == 0
	p := req.Producer

	// Every POST renews a sliding TTL, even one refused below (spec §15): the access is noted in
	// memory, which no rollback undoes; an accepted POST also persists it with its data.
	s.noteAccess(r, now)

	var st producerState
	if p != nil {
		st, err = loadProducer(tx, r.ID, p.ID)
		if err != nil {
			return AppendResult{}, err
		}
	}

	if r.Closed {
		if p != nil && r.ClosedByProducer.Valid && r.ClosedByProducer.String == p.ID &&
			r.ClosedByEpoch.Int64 == p.Epoch && r.ClosedBySeq.Int64 == p.Seq {
			return AppendResult{Tail: r.Tail, Closed: true, Duplicate: true, Epoch: p.Epoch, Seq: p.Seq}, nil
		}
		if p != nil && st.known && p.Epoch < st.epoch {
			return AppendResult{}, staleEpochError(st.epoch)
		}
		if closeOnly && p == nil {
			return AppendResult{Tail: r.Tail, Closed: true}, nil
		}
		return AppendResult{}, streamClosedError(r.Path, r.Tail)
	}

	if !closeOnly && MediaType(req.ContentType) != MediaType(r.ContentType) {
		return AppendResult{}, perr(foldstream.CodeConflict, "content type %q does not match the stream's %q", req.ContentType, r.ContentType)
	}

	// Producer decision table (spec §20.2). Validation proposes; nothing changes until the data
	// is in.
	if p != nil {
		switch {
		case !st.known:
			if p.Seq != 0 {
				*gapStream = r.ID
				return AppendResult{}, sequenceGapError(0, p.Seq)
			}
		case p.Epoch < st.epoch:
			return AppendResult{}, staleEpochError(st.epoch)
		case p.Epoch > st.epoch:
			if p.Seq != 0 {
				return AppendResult{}, perr(foldstream.CodeBadRequest, "a new producer epoch must start at seq 0")
			}
		case p.Seq <= st.lastSeq:
			return AppendResult{Tail: r.Tail, Duplicate: true, Epoch: st.epoch, Seq: st.lastSeq}, nil
		case p.Seq > st.lastSeq+1:
			*gapStream = r.ID
			return AppendResult{}, sequenceGapError(st.lastSeq+1, p.Seq)
		}
	}

	if req.StreamSeq != "" && r.StreamSeq.Valid && req.StreamSeq <= r.StreamSeq.String {
		return AppendResult{}, perr(foldstream.CodeConflict, "Stream-Seq %q is not greater than the last one %q", req.StreamSeq, r.StreamSeq.String)
	}
	if req.HasExpectedTail && req.ExpectedTail != r.Tail {
		e := foldstream.OffsetConflictError(req.ExpectedTail, r.Tail)
		e.Data[DataTail] = r.Tail
		return AppendResult{}, e
	}

	m, err := tx.Mem(r.ID, memLoader(r))
	if err != nil {
		return AppendResult{}, err
	}
	if !closeOnly {
		if IsJSONContentType(r.ContentType) {
			if msgErr != nil {
				return AppendResult{}, msgErr
			}
			if msgs == nil { // the request's content type matched without selecting JSON: cannot happen
				if msgs, err = FlattenJSON(req.Body, false); err != nil {
					return AppendResult{}, err
				}
			}
			kept, keys, err := dedupeEvents(tx, r, msgs)
			if err != nil {
				return AppendResult{}, err
			}
			if len(kept) > 0 {
				if err := s.insertRecord(tx, r, m, kept, nil, now, keys...); err != nil {
					return AppendResult{}, err
				}
			}
		} else if err := s.insertRecord(tx, r, m, nil, req.Body, now); err != nil {
			return AppendResult{}, err
		}
	}

	res := AppendResult{Tail: m.Tail, Closed: req.Close}
	if p != nil {
		if _, err := tx.Exec(`INSERT INTO producers(stream_id, producer_id, epoch, last_seq, updated_ms) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(stream_id, producer_id) DO UPDATE SET epoch = excluded.epoch, last_seq = excluded.last_seq, updated_ms = excluded.updated_ms`,
			r.ID, p.ID, p.Epoch, p.Seq, now.UnixMilli()); err != nil {
			return AppendResult{}, fmt.Errorf("save producer state: %w", err)
		}
		res.Epoch, res.Seq = p.Epoch, p.Seq
	}
	// One row update carries the tail, the access time, Stream-Seq and the closure.
	var streamSeq, by sql.NullString
	var epoch, seq sql.NullInt64
	if req.StreamSeq != "" {
		streamSeq = sql.NullString{String: req.StreamSeq, Valid: true}
	}
	if req.Close && p != nil {
		by = sql.NullString{String: p.ID, Valid: true}
		epoch = sql.NullInt64{Int64: p.Epoch, Valid: true}
		seq = sql.NullInt64{Int64: p.Seq, Valid: true}
	}
	if _, err := tx.Exec(`UPDATE streams SET tail = ?, last_access_ms = max(last_access_ms, ?), stream_seq = coalesce(?, stream_seq),
		closed = ?, closed_by_producer = ?, closed_by_epoch = ?, closed_by_seq = ? WHERE id = ?`,
		m.Tail, now.UnixMilli(), streamSeq, req.Close, by, epoch, seq, r.ID); err != nil {
		return AppendResult{}, fmt.Errorf("append: %w", err)
	}
	if req.Close {
		s.forgetCachedRow(tx, r.Path)
	}
	tx.Touch(r.ID)
	return res, nil
}

type producerState struct {
	known   bool
	epoch   int64
	lastSeq int64
}

func loadProducer(q querier, streamID int64, id string) (producerState, error) {
	var st producerState
	err := q.QueryRow(`SELECT epoch, last_seq FROM producers WHERE stream_id = ? AND producer_id = ?`, streamID, id).Scan(&st.epoch, &st.lastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return producerState{}, nil
	}
	if err != nil {
		return producerState{}, fmt.Errorf("load producer state: %w", err)
	}
	st.known = true
	return st, nil
}

// eventKeyOf returns the idempotency key of an event-shaped message (a JSON object with a string
// "type" and a non-empty string "idempotencyKey"), or "".
func eventKeyOf(msg []byte) (foldstream.EventInput, string) {
	if len(msg) == 0 || msg[0] != '{' || !bytes.Contains(msg, []byte(`"idempotencyKey"`)) {
		return foldstream.EventInput{}, ""
	}
	var probe struct {
		Type           *string         `json:"type"`
		IdempotencyKey *string         `json:"idempotencyKey"`
		Payload        json.RawMessage `json:"payload"`
		Metadata       json.RawMessage `json:"metadata"`
	}
	// Exact key names, as the event view reads them (rawjson.UnmarshalExact).
	if rawjson.UnmarshalExact(msg, &probe) != nil || probe.Type == nil || probe.IdempotencyKey == nil || *probe.IdempotencyKey == "" {
		return foldstream.EventInput{}, ""
	}
	return foldstream.EventInput{Type: *probe.Type, Payload: probe.Payload, Metadata: probe.Metadata}, *probe.IdempotencyKey
}

// dedupeEvents honours event-level idempotency keys: a message whose key already names the same
// event in this stream (fork ancestors included) or earlier in the batch is dropped; one whose key
// names a different event refuses the whole record with IDEMPOTENCY_CONFLICT (409). Sameness is
// the event view's (foldstream.SameIdempotentEvent: type, payload and metadata).
func dedupeEvents(tx *Tx, r *streamRow, msgs [][]byte) ([][]byte, []string, error) {
	var kept [][]byte
	var keys []string
	seen := map[string]foldstream.EventInput{}
	anyKey := false
	for _, msg := range msgs {
		in, key := eventKeyOf(msg)
		if key == "" {
			kept = append(kept, msg)
			keys = append(keys, "")
			continue
		}
		anyKey = true
		if prev, ok := seen[key]; ok {
			if !foldstream.SameIdempotentEvent(foldstream.Event{Type: prev.Type, Payload: prev.Payload, Metadata: prev.Metadata}, in) {
				return nil, nil, foldstream.IdempotencyConflictError(key, 0)
			}
			continue
		}
		existing, found, err := lookupIdempotencyKey(tx, r, key)
		if err != nil {
			return nil, nil, err
		}
		if found {
			if !foldstream.SameIdempotentEvent(existing, in) {
				return nil, nil, foldstream.IdempotencyConflictError(key, existing.Offset)
			}
		} else {
			kept = append(kept, msg)
			keys = append(keys, key)
		}
		seen[key] = in
	}
	if !anyKey {
		return msgs, nil, nil
	}
	return kept, keys, nil
}
