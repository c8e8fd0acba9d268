package server

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream"
)

// reservedKeyPrefix starts the idempotency keys of processors' own emitted events; HTTP writers
// may not use it (docs/server.md#provenance).
const reservedKeyPrefix = foldtype.ProcessorKeyPrefix

// handleCreate serves PUT (docs/server.md#streams).
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, name string, principal *foldtype.Principal) {
	h := r.Header
	req := stream.CreateRequest{Path: name, ContentType: strings.TrimSpace(h.Get("Content-Type"))}
	if v := h.Values(wire.HeaderStreamTTL); len(v) > 0 {
		ttl, err := ParseTTL(v[0])
		if err != nil || len(v) > 1 {
			writeError(w, http.StatusBadRequest, "malformed Stream-TTL: use a whole number of seconds like 3600")
			return
		}
		req.TTLSeconds, req.HasTTL = ttl, true
	}
	if v := h.Values(wire.HeaderStreamExpiresAt); len(v) > 0 {
		t, err := ParseExpiresAt(v[0])
		if err != nil || len(v) > 1 {
			writeError(w, http.StatusBadRequest, "malformed Stream-Expires-At: use an RFC 3339 timestamp")
			return
		}
		if !t.After(s.cfg.Clock.Now()) {
			writeError(w, http.StatusBadRequest, "Stream-Expires-At is in the past: the stream would be expired at creation")
			return
		}
		req.ExpiresAt = t
	}
	if req.HasTTL && !req.ExpiresAt.IsZero() {
		writeError(w, http.StatusBadRequest, "give Stream-TTL or Stream-Expires-At, not both")
		return
	}
	req.Closed = isTrue(h.Get(wire.HeaderStreamClosed))

	_, hasFrom := h[http.CanonicalHeaderKey(wire.HeaderStreamForkedFrom)]
	from := strings.TrimSpace(h.Get(wire.HeaderStreamForkedFrom))
	if hasFrom {
		if from == "" {
			writeError(w, http.StatusBadRequest, "empty Stream-Forked-From")
			return
		}
		src, err := s.forkSource(r, from)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		// Forking reads the source: the caller must be allowed to read it.
		if _, ok := s.authorize(w, r, OpRead, src); !ok {
			return
		}
		req.ForkedFrom = src
	}
	if v, ok := h[http.CanonicalHeaderKey(wire.HeaderStreamForkOffset)]; ok {
		if !hasFrom {
			writeError(w, http.StatusBadRequest, "Stream-Fork-Offset needs Stream-Forked-From")
			return
		}
		pos, now, err := ParseOffset(strings.TrimSpace(v[0]))
		if err != nil || len(v) > 1 {
			writeError(w, http.StatusBadRequest, "malformed Stream-Fork-Offset")
			return
		}
		if !now {
			req.ForkOffset, req.HasForkOffset = pos, true
		}
	}
	if v, ok := h[http.CanonicalHeaderKey(wire.HeaderStreamForkSubOffset)]; ok {
		sub, valid := parseCanonicalUint(strings.TrimSpace(v[0]), 1<<53)
		if !valid || len(v) > 1 {
			writeError(w, http.StatusBadRequest, "malformed Stream-Fork-Sub-Offset: use a non-negative integer")
			return
		}
		if !hasFrom {
			writeError(w, http.StatusBadRequest, "Stream-Fork-Sub-Offset needs Stream-Forked-From")
			return
		}
		if sub > 0 && !req.HasForkOffset {
			writeError(w, http.StatusBadRequest, "Stream-Fork-Sub-Offset needs Stream-Fork-Offset")
			return
		}
		req.ForkSubOffset = sub
	}
	if req.HasForkOffset && req.ForkOffset == beyondTail {
		writeError(w, http.StatusBadRequest, "Stream-Fork-Offset is past the source's tail")
		return
	}
	body, release, ok := s.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	if len(body) > 0 { // the store applies the rules if the stream's messages are JSON
		req.Provenance = s.stamps.provenanceOf(principal)
	}
	req.Body = body

	res, err := s.st.Protocol().CreateStream(r.Context(), req)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := w.Header()
	out.Set("Content-Type", res.Info.ContentType)
	out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Info.Tail))
	if res.Info.Closed {
		out.Set(wire.HeaderStreamClosed, "true")
	}
	if res.Created {
		out.Set("Location", s.location(r))
		w.WriteHeader(http.StatusCreated)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// forkSource maps a Stream-Forked-From value to a store path: a path under Prefix on this
// server, or a full URL naming this server (its PublicBaseURL, or the request's own host). A
// stream on another server cannot be forked: 400.
func (s *Server) forkSource(r *http.Request, v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("malformed Stream-Forked-From: give the source's path on this server, e.g. " + s.cfg.Prefix + "name")
	}
	if u.Scheme != "" || u.Host != "" {
		own := r.Host
		if s.publicBase != nil {
			own = s.publicBase.Host
		}
		if (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, own) {
			return "", errors.New("Stream-Forked-From names another server: only streams of this server can be forked (give a path like " + s.cfg.Prefix + "name)")
		}
	}
	p := u.Path
	if !strings.HasPrefix(p, s.cfg.Prefix) || len(p) == len(s.cfg.Prefix) {
		return "", errors.New("Stream-Forked-From must be a stream path on this server, e.g. " + s.cfg.Prefix + "name")
	}
	return "/" + strings.TrimPrefix(p, s.cfg.Prefix), nil
}

// location is the absolute URL of the stream a request created: PublicBaseURL plus the path, or
// the request's own host when it was checked against a list of allowed names; otherwise the
// path alone (a client's Host is never echoed unchecked).
func (s *Server) location(r *http.Request) string {
	if s.publicBase != nil {
		return s.publicBase.String() + r.URL.EscapedPath()
	}
	if !s.hostVetted(r) || hostName(r.Host) == "" {
		return r.URL.EscapedPath()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.EscapedPath()
}

// handleAppend serves POST (docs/server.md#streams).
func (s *Server) handleAppend(w http.ResponseWriter, r *http.Request, name string, principal *foldtype.Principal) {
	h := r.Header
	req := stream.AppendRequest{Path: name, Close: isTrue(h.Get(wire.HeaderStreamClosed))}

	// Producer headers: all three or none, well-formed (docs/server.md#idempotent-producers).
	pid, hasID := h[http.CanonicalHeaderKey(wire.HeaderProducerID)]
	pep, hasEpoch := h[http.CanonicalHeaderKey(wire.HeaderProducerEpoch)]
	pseq, hasSeq := h[http.CanonicalHeaderKey(wire.HeaderProducerSeq)]
	if hasID || hasEpoch || hasSeq {
		if !hasID || !hasEpoch || !hasSeq {
			writeError(w, http.StatusBadRequest, "send Producer-Id, Producer-Epoch and Producer-Seq together")
			return
		}
		id := strings.TrimSpace(pid[0])
		if id == "" {
			writeError(w, http.StatusBadRequest, "Producer-Id must not be empty")
			return
		}
		epoch, ok1 := parseDigits(strings.TrimSpace(pep[0]), maxSafeInteger)
		seq, ok2 := parseDigits(strings.TrimSpace(pseq[0]), maxSafeInteger)
		if !ok1 || !ok2 {
			writeError(w, http.StatusBadRequest, "Producer-Epoch and Producer-Seq must be non-negative integers up to 2^53-1")
			return
		}
		req.Producer = &stream.ProducerHeaders{ID: id, Epoch: epoch, Seq: seq}
		// Known to be arriving before its body is read, so a later seq that overtakes it waits
		// for it rather than answering a gap (docs/store.md#idempotent-producers).
		defer s.st.Protocol().ProducerArriving(name, id, epoch, seq)()
	}
	if v := h.Get(HeaderExpectedOffset); v != "" {
		pos, now, err := ParseOffset(strings.TrimSpace(v))
		if err != nil || now {
			writeError(w, http.StatusBadRequest, "malformed "+HeaderExpectedOffset+": use an offset the server returned, or -1")
			return
		}
		req.ExpectedTail, req.HasExpectedTail = pos, true
	}
	req.StreamSeq = h.Get(wire.HeaderStreamSeq)

	body, release, ok := s.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	received := len(body)
	req.ContentType = strings.TrimSpace(h.Get("Content-Type"))
	if len(body) > 0 { // the store applies the rules if the stream's messages are JSON
		req.Provenance = s.stamps.provenanceOf(principal)
	}
	req.Body = body
	if len(body) == 0 && !req.Close {
		writeError(w, http.StatusBadRequest, "empty body: send data, or Stream-Closed: true to close")
		return
	}
	if len(body) > 0 && req.ContentType == "" {
		writeError(w, http.StatusBadRequest, "a body needs a Content-Type matching the stream's")
		return
	}

	ctx, span := s.startAppendSpan(r.Context())
	if span != nil {
		req.Provenance = tracedProvenance(ctx, req.Provenance)
	}
	res, err := s.st.Protocol().AppendRecord(ctx, req)
	endAppendSpan(span, name, received, res.Tail, err)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.metrics.appended(received)
	out := w.Header()
	out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Tail))
	if res.Closed {
		out.Set(wire.HeaderStreamClosed, "true")
	}
	if req.Producer != nil {
		out.Set(wire.HeaderProducerEpoch, itoa(res.Epoch))
		out.Set(wire.HeaderProducerSeq, itoa(res.Seq))
		if res.Duplicate || len(body) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleHead serves HEAD (docs/server.md#streams). It never renews a TTL.
func (s *Server) handleHead(w http.ResponseWriter, r *http.Request, name string) {
	info, err := s.st.Protocol().HeadStream(r.Context(), name)
	out := w.Header()
	out.Set("Cache-Control", "no-store")
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out.Set("Content-Type", info.ContentType)
	out.Set(wire.HeaderStreamNextOffset, FormatOffset(info.Tail))
	if info.HasTTL {
		out.Set(wire.HeaderStreamTTL, itoa(info.TTLSeconds))
	}
	if !info.ExpiresAt.IsZero() {
		out.Set(wire.HeaderStreamExpiresAt, info.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if info.Closed {
		out.Set(wire.HeaderStreamClosed, "true")
	}
	if info.Paused {
		setPaused(out, info.PauseReason)
	}
	w.WriteHeader(http.StatusOK)
}

// handleDelete serves DELETE (docs/server.md#streams).
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.st.Protocol().DeleteStream(r.Context(), name); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readQuery is a parsed GET query.
type readQuery struct {
	after   int64
	now     bool
	live    string // "", "long-poll" or "sse"
	cursor  string
	explict bool // offset was given
}

// parseReadQuery validates the query of a GET (docs/server.md#offsets, docs/server.md#streams).
func parseReadQuery(raw string) (readQuery, error) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return readQuery{}, errors.New("malformed query string")
	}
	var q readQuery
	if v, ok := vals["offset"]; ok {
		if len(v) != 1 {
			return readQuery{}, errors.New("give offset once")
		}
		q.after, q.now, err = ParseOffset(v[0])
		if err != nil {
			return readQuery{}, err
		}
		q.explict = true
	}
	if v, ok := vals["live"]; ok {
		if len(v) != 1 || (v[0] != "long-poll" && v[0] != "sse") {
			return readQuery{}, errors.New("live must be long-poll or sse")
		}
		q.live = v[0]
		if !q.explict {
			return readQuery{}, errors.New("live reads need an offset (-1 for the start, now for the tail)")
		}
	}
	q.cursor = vals.Get("cursor")
	return q, nil
}

// handleRead serves GET (docs/server.md#streams).
func (s *Server) handleRead(w http.ResponseWriter, r *http.Request, name string) {
	q, err := parseReadQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.live == "" {
		s.serveCatchUp(w, r, name, q)
		return
	}
	if !s.acquireLiveReader(w) {
		return
	}
	defer s.releaseLiveReader()
	if q.live == "sse" {
		s.serveSSE(w, r, name, q)
	} else {
		s.serveLongPoll(w, r, name, q)
	}
}

// etag is the validator of one read answer: it changes with the range and with closure, and
// differs between incarnations of a path.
func etag(info stream.StreamInfo, after int64, res stream.ReadResult) string {
	tag := base64.RawURLEncoding.EncodeToString([]byte(info.Path)) + ":" + itoa(info.CreatedMs) + ":" +
		itoa(after) + ":" + itoa(res.Next)
	if info.Closed && res.UpToDate {
		tag += ":c"
	}
	return `"` + tag + `"`
}

// etagMatches reports whether an If-None-Match header lists tag (or *).
func etagMatches(header, tag string) bool {
	for _, part := range strings.Split(header, ",") {
		p := strings.TrimSpace(part)
		p = strings.TrimPrefix(p, "W/")
		if p == "*" || p == tag {
			return true
		}
	}
	return false
}

// writeData answers 200 with one read's data and headers.
func (s *Server) writeData(w http.ResponseWriter, r *http.Request, after int64, res stream.ReadResult, cursor string) {
	out := w.Header()
	out.Set("Content-Type", res.Info.ContentType)
	out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Next))
	if res.UpToDate {
		out.Set(wire.HeaderStreamUpToDate, "true")
		if res.Info.Closed {
			out.Set(wire.HeaderStreamClosed, "true")
		}
	}
	if cursor != "" {
		out.Set(wire.HeaderStreamCursor, cursor)
	}
	tag := etag(res.Info, after, res)
	out.Set("ETag", tag)
	if res.UpToDate && !res.Info.Closed {
		// The tail moves: let caches revalidate rather than serve it stale.
		out.Set("Cache-Control", "no-cache")
	} else {
		// Historical ranges (and the final range of a closed stream) never change.
		out.Set("Cache-Control", "public, max-age=60, stale-while-revalidate=300")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(res.Body)
	}
}

// serveCatchUp answers a plain GET (docs/server.md#streams).
func (s *Server) serveCatchUp(w http.ResponseWriter, r *http.Request, name string, q readQuery) {
	res, err := s.st.Protocol().ReadRecords(r.Context(), stream.ReadRequest{Path: name, After: q.after, AtTail: q.now, MaxBytes: s.cfg.ReadChunkBytes})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if q.now {
		out := w.Header()
		out.Set("Content-Type", res.Info.ContentType)
		out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Next))
		out.Set(wire.HeaderStreamUpToDate, "true")
		out.Set("Cache-Control", "no-store")
		if res.Info.Closed {
			out.Set(wire.HeaderStreamClosed, "true")
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(res.Body)
		return
	}
	if !res.UpToDate {
		// More than one page: stream the rest up to the tail seen now (catchup.go).
		s.streamCatchUp(w, r, name, q.after, res)
		return
	}
	s.writeData(w, r, q.after, res, "")
}

// serveLongPoll answers GET live=long-poll (docs/server.md#streams).
func (s *Server) serveLongPoll(w http.ResponseWriter, r *http.Request, name string, q readQuery) {
	ctx := r.Context()
	timer := time.NewTimer(s.cfg.LongPollTimeout)
	defer timer.Stop()
	lw := newLiveWriter(w, s.cfg.WriteTimeout, time.Time{})
	after, atTail := q.after, q.now
	for {
		res, err := s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: after, AtTail: atTail, MaxBytes: s.cfg.LiveChunkBytes, Watch: true})
		if err != nil {
			s.writeStoreError(w, r, err)
			return
		}
		if atTail {
			after, atTail = res.Next, false
		} else if res.Count > 0 || res.Next > after {
			lw.deadline()
			s.writeData(w, r, after, res, nextCursor(s.cfg.Clock.Now(), q.cursor))
			return
		}
		out := w.Header()
		if res.Info.Closed && res.UpToDate {
			out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Next))
			out.Set(wire.HeaderStreamUpToDate, "true")
			out.Set(wire.HeaderStreamClosed, "true")
			out.Set("Cache-Control", "no-store")
			lw.writeHeader(http.StatusNoContent)
			return
		}
		select {
		case <-res.Changed:
			continue
		case <-ctx.Done():
			return
		case <-s.stopping: // shutting down: answer as a timeout, the client polls again
		case <-timer.C:
		}
		if !s.st.Driver().Exclusive() {
			// On a shared database this node hears of other nodes' commits by notification, which
			// may still be on its way (or lost with a connection the node does not yet know is
			// dead): before claiming Stream-Up-To-Date, confirm the tail with the database itself,
			// so a client never stops reading short of an append another node acknowledged
			// (docs/postgres.md#live-reads). One read per long-poll that ran out.
			res, err = s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: after, MaxBytes: s.cfg.LiveChunkBytes})
			if err != nil {
				s.writeStoreError(w, r, err)
				return
			}
			if res.Count > 0 || res.Next > after {
				lw.deadline()
				s.writeData(w, r, after, res, nextCursor(s.cfg.Clock.Now(), q.cursor))
				return
			}
		}
		out.Set(wire.HeaderStreamNextOffset, FormatOffset(res.Next))
		out.Set(wire.HeaderStreamUpToDate, "true")
		out.Set(wire.HeaderStreamCursor, nextCursor(s.cfg.Clock.Now(), q.cursor))
		out.Set("Cache-Control", "no-store")
		lw.writeHeader(http.StatusNoContent)
		return
	}
}
