package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/wire"
)

// Processors is what the server needs from a processor host to serve processors over HTTP.
// *host.Host implements it.
type Processors interface {
	// Snapshot returns the processor's cursor and reduced state, with read-your-writes.
	Snapshot(ctx context.Context, path, slug string) (foldtype.Snapshot[json.RawMessage], error)
	// LiveSnapshot returns the processor's live state {rev, state}, with read-your-writes.
	LiveSnapshot(ctx context.Context, path, slug string) (foldtype.LiveSnapshot[json.RawMessage], error)
	// WaitUntilProcessed waits until the processor reduced through offset.
	WaitUntilProcessed(ctx context.Context, path, slug string, offset int64, timeout time.Duration) error
}

// ProcessorLister is implemented by a Processors that can report which processors run on a stream
// (*host.Host does); InfoPath lists them. Without it, InfoPath answers "processors": [].
type ProcessorLister interface {
	// ProcessorsOn reports the processors running on the stream at path, without waiting for them.
	ProcessorsOn(ctx context.Context, path string) []foldtype.ProcessorStatus
}

// ProcessorProgress is optionally implemented by a Processors: the offset a processor has reduced
// through, without waiting. When available, a processor route that timed out waiting reports
// it in the Foldstream-Processor-Offset header.
type ProcessorProgress interface {
	ReducedThroughOffset(path, slug string) (int64, error)
}

// Processor routes (beyond the Durable Streams protocol), under Config.ProcessorPrefix:
//
//	GET /v1/processor/<slug>/<stream>                 → 200 {"offset": n, "state": …}
//	GET /v1/processor/<slug>/<stream>?view=live       → 200 {"rev": r, "state": …}
//	GET /v1/processor/<slug>/<stream>?live=sse        → SSE: "seed" {rev, state}, then "delta"
//	                                                     {from, to, patch} events
//	POST /v1/processor/<slug>/<stream>?op=retry        → an operator's verb (server/ops.go)
//	GET /v1/processor/<slug>/<stream>?parked=1        → its parked events (server/parked.go)
//
// <stream> is the stream's name as under /v1/stream/ (the store path without its leading slash).
// waitUntilProcessed=<offset> (a Stream-Next-Offset value or a plain integer) makes the first two
// wait until the processor reduced through that offset — read-your-writes for a client that has
// just appended; timeout=<duration> (e.g. 2s, at most 60s) bounds the wait (default 10 s), after
// which the answer is always 504 with Foldstream-Error-Code PROCESS_TIMEOUT and the processor's
// offset in Foldstream-Processor-Offset.
func (s *Server) serveProcessor(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method == http.MethodPost && r.URL.Query().Has("op") {
		s.serveProcessorOp(w, r, rest) // an operator's verb: server/ops.go
		return
	}
	if readOnly(r.Method) && r.URL.Query().Has("audit") {
		s.serveProcessorAudit(w, r, rest) // the operators' verbs on it: server/ops.go
		return
	}
	if readOnly(r.Method) && r.URL.Query().Has("parked") {
		s.serveProcessorParked(w, r, rest) // its parked events: server/parked.go
		return
	}
	if !readOnly(r.Method) {
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, "processors are read with GET; an operator's verb is a POST with ?op=")
		return
	}
	slug, path, _, ok := s.processorRoute(w, r, rest, OpProcessorRead, "")
	if !ok {
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string")
		return
	}
	if q.Get("live") == "sse" {
		if !s.acquireLiveReader(w) {
			return
		}
		defer s.releaseLiveReader()
		s.serveLiveStateSSE(w, r, path, slug)
		return
	}
	// Every wait for the processor is bounded (docs/server.md#processors-over-http): a lagging
	// processor answers 504 instead of holding the request.
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
	defer cancel()
	if v := q.Get("waitUntilProcessed"); v != "" {
		off, err := parseProcessedOffset(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		timeout := s.cfg.ProcessorWaitTimeout
		if t := q.Get("timeout"); t != "" {
			d, err := time.ParseDuration(t)
			if err != nil || d <= 0 || d > time.Minute {
				writeError(w, http.StatusBadRequest, "timeout must be a duration like 2s, at most 60s")
				return
			}
			timeout = d
		}
		// The wait's own timeout ends it (the processors answer with their offset); the request's
		// bound is a backstop a little later, so the answer is the same every time.
		cancel()
		ctx, cancel = context.WithTimeout(r.Context(), timeout+time.Second)
		defer cancel()
		if err := s.waitProcessed(ctx, path, slug, off, timeout); err != nil {
			if waitTimedOut(r, err) {
				s.writeWaitTimeout(w, r, path, slug, off, timeout, err)
				return
			}
			s.writeProcessorError(w, r, path, slug, err)
			return
		}
		cancel()
		ctx, cancel = context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
		defer cancel()
	}
	if v := q.Get("version"); v != "" {
		s.serveProcessorVersion(ctx, w, r, path, slug, v) // one version of it: server/rebuild.go
		return
	}
	var body []byte
	marked := "" // the processor's state when the answer is its last good state
	switch q.Get("view") {
	case "", "snapshot":
		snap, err := s.cfg.Processors.Snapshot(ctx, path, slug)
		if state := lastGoodFor(err); state != "" {
			// A failing or paused processor's plain snapshot is its last good state, marked
			// (docs/operations.md#last-good-state); waits and live views keep the 503.
			if lg, ok := s.cfg.Processors.(LastGoodStates); ok {
				if good, gerr := lg.LastGoodState(ctx, path, slug); gerr == nil {
					snap, err, marked = good, nil, state
				}
			}
		}
		if err != nil {
			s.writeProcessorError(w, r, path, slug, err)
			return
		}
		body, err = json.Marshal(snap)
		if err != nil {
			s.writeProcessorError(w, r, path, slug, err)
			return
		}
	case "live":
		live, err := s.cfg.Processors.LiveSnapshot(ctx, path, slug)
		if err != nil {
			s.writeProcessorError(w, r, path, slug, err)
			return
		}
		body = liveSeedJSON(live)
	default:
		writeError(w, http.StatusBadRequest, "view must be snapshot or live")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if marked != "" {
		h.Set(HeaderProcessorState, marked)
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// HeaderProcessorState marks a processor snapshot that is the processor's last good state: its
// value is the processor's state, failing or paused (docs/operations.md#last-good-state).
const HeaderProcessorState = wire.HeaderProcessorState

// lastGoodFor returns the state a snapshot read's error says the processor is in when its last
// good state answers instead (failing or paused), or "".
func lastGoodFor(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, foldtype.ErrProcessorFailing):
		return foldtype.StateFailing
	case errors.Is(err, foldtype.ErrProcessorPaused):
		return foldtype.StatePaused
	}
	return ""
}

// waitProcessed waits until the processor reduced through off, for the whole timeout: a host that
// bounds one wait more tightly (host.Config.MaxWait) is asked again until the timeout has passed.
func (s *Server) waitProcessed(ctx context.Context, path, slug string, off int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		start := time.Now()
		err := s.cfg.Processors.WaitUntilProcessed(ctx, path, slug, off, time.Until(deadline))
		// Asked again only after a wait that lasted (a host's own bound), never in a tight loop.
		if err == nil || ctx.Err() != nil || !errors.Is(err, foldtype.ErrCatchingUp) ||
			time.Since(start) < 100*time.Millisecond || time.Until(deadline) < 10*time.Millisecond {
			return err
		}
	}
}

// waitTimedOut reports whether a waitUntilProcessed wait ended at its timeout (not the client's
// going away): the processor did not reach the offset in time.
func waitTimedOut(r *http.Request, err error) bool {
	if r.Context().Err() != nil {
		return false
	}
	return errors.Is(err, foldtype.ErrCatchingUp) || errors.Is(err, foldtype.ErrProcessTimeout) ||
		errors.Is(err, foldtype.ErrWaitTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// writeWaitTimeout is the one answer of a waitUntilProcessed wait that timed out
// (docs/server.md#processors-over-http): 504 PROCESS_TIMEOUT, with the processor's offset in
// Foldstream-Processor-Offset and the message when it is known.
func (s *Server) writeWaitTimeout(w http.ResponseWriter, r *http.Request, path, slug string, want int64, timeout time.Duration, err error) {
	off, known := int64(0), false
	var fe *foldtype.Error
	if errors.As(err, &fe) {
		off, known = dataOffset(fe.Data)
	}
	if !known {
		if pp, ok := s.cfg.Processors.(ProcessorProgress); ok {
			if o, perr := pp.ReducedThroughOffset(path, slug); perr == nil {
				off, known = o, true
			}
		}
	}
	msg := fmt.Sprintf("processor %q did not reach offset %d on %q within %s", slug, want, path, timeout)
	if known {
		w.Header().Set(HeaderProcessorOffset, FormatOffset(off))
		msg = fmt.Sprintf("processor %q reduced %q through offset %d, not %d, within %s", slug, path, off, want, timeout)
	}
	writeCoded(w, foldtype.CodeProcessTimeout, msg+": retry later", 1)
}

// parseProcessedOffset accepts a protocol offset or a plain non-negative integer.
func parseProcessedOffset(v string) (int64, error) {
	if n, ok := parseDigits(v, 1<<62); ok {
		return n, nil
	}
	pos, now, err := ParseOffset(v)
	if err != nil || now || pos == beyondTail {
		return 0, errors.New("waitUntilProcessed must be an offset the server returned, or an integer")
	}
	return pos, nil
}

func liveSeedJSON(live foldtype.LiveSnapshot[json.RawMessage]) []byte {
	var b bytes.Buffer
	b.WriteString(`{"rev":`)
	b.WriteString(strconv.FormatInt(live.Rev, 10))
	b.WriteString(`,"state":`)
	if len(live.State) == 0 {
		b.WriteString("null")
	} else if err := json.Compact(&b, live.State); err != nil {
		b.WriteString("null")
	}
	b.WriteByte('}')
	return b.Bytes()
}

// writeProcessorError answers a processor route's failure: its code's status from the one table
// (errors.go), with the processor's offset when it is known — from the error's data (CATCHING_UP
// carries it) or from ProcessorProgress after a timed-out wait.
func (s *Server) writeProcessorError(w http.ResponseWriter, r *http.Request, path, slug string, err error) {
	if r.Context().Err() != nil {
		return // the client is gone
	}
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		if errors.Is(err, context.DeadlineExceeded) {
			fe = &foldtype.Error{Code: foldtype.CodeProcessTimeout,
				Message: "the processor did not catch up within " + s.cfg.ProcessorWaitTimeout.String() + ": retry later"}
		}
	}
	if fe == nil || statusByCode[fe.Code] == 0 {
		s.logWithheld(w, r, foldtype.CodeInternal, err)
		writeError(w, http.StatusInternalServerError, withheldMessages[foldtype.CodeInternal])
		return
	}
	if off, ok := dataOffset(fe.Data); ok && fe.Code == foldtype.CodeCatchingUp {
		w.Header().Set(HeaderProcessorOffset, FormatOffset(off))
	} else if pp, ok := s.cfg.Processors.(ProcessorProgress); ok && (fe.Code == foldtype.CodeProcessTimeout || fe.Code == foldtype.CodeWaitTimeout) {
		if off, err := pp.ReducedThroughOffset(path, slug); err == nil {
			w.Header().Set(HeaderProcessorOffset, FormatOffset(off))
		}
	}
	retry := 1
	switch fe.Code {
	case foldtype.CodeProcessorParked:
		retry = parkedRetryAfter
	case foldtype.CodeProcessorFailing:
		// Until the host's next retry of the failing processor.
		if at, ok := fe.Data["nextRetry"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
				retry = max(1, int(math.Ceil(time.Until(t).Seconds())))
			}
		}
	}
	msg, held := clientMessage(fe.Code, err)
	if held {
		s.logWithheld(w, r, fe.Code, err)
	}
	writeCodedProblem(w, fe.Code, msg, retry, problemMembers(fe, held))
}

// parkedRetryAfter is the Retry-After (seconds) of a parked processor's 503: it stays parked
// until an operator acts.
const parkedRetryAfter = 60

// dataOffset reads data["offset"] as an offset.
func dataOffset(data map[string]any) (int64, bool) {
	switch v := data["offset"].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), true
	}
	return 0, false
}

// serveLiveStateSSE streams a processor's live state: a "seed" event {rev, state}, then one
// "delta" event {from, to, patch} per change, each applying to the state at rev from (RFC 6902
// patch). When a delta cannot be applied in order (a null patch, a missed delta) the server sends a
// fresh seed instead, so a client only ever needs: on seed, replace; on delta, apply. Keep-alive
// comments every LongPollTimeout; the connection ends after SSEMaxDuration (reconnect and
// re-seed).
func (s *Server) serveLiveStateSSE(w http.ResponseWriter, r *http.Request, path, slug string) {
	ctx := r.Context()
	hub, reader, err := s.joinLive(path, slug) // before the seed: no delta after it is missed
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	defer s.leaveLive(path, hub, reader)
	// The seed waits for the processor like a snapshot does, within the same bound.
	boundCtx, cancelBound := context.WithTimeout(ctx, s.cfg.ProcessorWaitTimeout)
	live, err := s.cfg.Processors.LiveSnapshot(boundCtx, path, slug)
	cancelBound()
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	lw := newLiveWriter(w, s.cfg.WriteTimeout, time.Now().Add(s.cfg.SSEMaxDuration))
	if !lw.writeHeader(http.StatusOK) {
		return
	}
	var buf bytes.Buffer
	sendSeed := func() bool {
		buf.WriteString("event: seed\ndata:")
		buf.Write(liveSeedJSON(live))
		buf.WriteString("\n\n")
		ok := lw.send(buf.Bytes())
		buf.Reset()
		if buf.Cap() > idleBufferBytes {
			buf = bytes.Buffer{}
		}
		return ok
	}
	if !sendSeed() {
		return
	}
	held := live.Rev
	deadline := time.NewTimer(s.cfg.SSEMaxDuration)
	defer deadline.Stop()
	keepAlive := time.NewTicker(s.cfg.LongPollTimeout)
	defer keepAlive.Stop()
	reseed := func() bool {
		bctx, cancel := context.WithTimeout(ctx, s.cfg.ProcessorWaitTimeout)
		l, err := s.cfg.Processors.LiveSnapshot(bctx, path, slug)
		cancel()
		if err != nil {
			return false
		}
		live, held = l, l.Rev
		return sendSeed()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-s.stopping:
			return
		case <-keepAlive.C:
			if !lw.send([]byte(": keep-alive\n\n")) {
				return
			}
		case <-reader.overflow:
			for len(reader.frames) > 0 {
				<-reader.frames
			}
			if !reseed() {
				return
			}
		case f := <-reader.frames:
			if f.to <= held {
				continue // already in the seed
			}
			if f.from != held || f.frame == nil {
				if !reseed() {
					return
				}
				continue
			}
			if !lw.send(f.frame) {
				return
			}
			held = f.to
		}
	}
}

// processorRoute reads the slug and stream path of a processor route's rest ("<slug>/<stream>")
// and checks the request's origin and that its caller may do op on that stream. When ok is false
// the answer is written: 404 naming the route's form (with query, e.g. "?audit=1") when rest
// names no processor, or the refusal.
func (s *Server) processorRoute(w http.ResponseWriter, r *http.Request, rest string, op Operation, query string) (slug, path string, who *foldtype.Principal, ok bool) {
	slug, name, found := strings.Cut(rest, "/")
	if !found || slug == "" || name == "" {
		writeError(w, http.StatusNotFound, "use "+s.cfg.ProcessorPrefix+"<slug>/<stream>"+query)
		return "", "", nil, false
	}
	path = "/" + name
	if !s.checkOrigin(w, r, op) {
		return "", "", nil, false
	}
	if who, ok = s.authorize(w, r, op, path); !ok {
		return "", "", nil, false
	}
	return slug, path, who, true
}
