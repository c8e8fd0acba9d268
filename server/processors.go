package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
)

// Processors is what the server needs from a processor host to serve processors over HTTP.
// *host.Host implements it.
type Processors interface {
	// Snapshot returns the processor's cursor and reduced state, with read-your-writes.
	Snapshot(ctx context.Context, path, slug string) (host.Snapshot, error)
	// LiveSnapshot returns the processor's live state {rev, state}, with read-your-writes.
	LiveSnapshot(ctx context.Context, path, slug string) (foldstream.LiveSnapshot, error)
	// WaitUntilProcessed waits until the processor reduced through offset.
	WaitUntilProcessed(ctx context.Context, path, slug string, offset int64, timeout time.Duration) error
}

var _ Processors = (*host.Host)(nil)

// Processor routes (beyond the Durable Streams protocol), under Config.ProcessorPrefix:
//
//	GET /v1/processor/<slug>/<stream>                 → 200 {"offset": n, "state": …}
//	GET /v1/processor/<slug>/<stream>?view=live       → 200 {"rev": r, "state": …}
//	GET /v1/processor/<slug>/<stream>?live=sse        → SSE: "seed" {rev, state}, then "delta"
//	                                                     {from, to, patch} events
//
// <stream> is the stream's name as under /v1/stream/ (the store path without its leading slash).
// waitUntilProcessed=<offset> (a Stream-Next-Offset value or a plain integer) makes the first two
// wait until the processor reduced through that offset — read-your-writes for a client that has
// just appended; timeout=<duration> (e.g. 2s, at most 60s) bounds the wait (default 10 s), after
// which the answer is 504 with Foldstream-Error-Code PROCESS_TIMEOUT.
func (s *Server) serveProcessor(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, "processors are read-only: use GET")
		return
	}
	slug, name, ok := strings.Cut(rest, "/")
	if !ok || slug == "" || name == "" {
		writeError(w, http.StatusNotFound, "use "+s.cfg.ProcessorPrefix+"<slug>/<stream>")
		return
	}
	path := "/" + name
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string")
		return
	}
	ctx := r.Context()
	if q.Get("live") == "sse" {
		s.serveLiveStateSSE(w, r, path, slug)
		return
	}
	if v := q.Get("waitUntilProcessed"); v != "" {
		off, err := parseProcessedOffset(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		timeout := foldstream.DefaultWaitTimeout
		if t := q.Get("timeout"); t != "" {
			d, err := time.ParseDuration(t)
			if err != nil || d <= 0 || d > time.Minute {
				writeError(w, http.StatusBadRequest, "timeout must be a duration like 2s, at most 60s")
				return
			}
			timeout = d
		}
		if err := s.cfg.Processors.WaitUntilProcessed(ctx, path, slug, off, timeout); err != nil {
			s.writeProcessorError(w, r, err)
			return
		}
	}
	var body []byte
	switch q.Get("view") {
	case "", "snapshot":
		snap, err := s.cfg.Processors.Snapshot(ctx, path, slug)
		if err != nil {
			s.writeProcessorError(w, r, err)
			return
		}
		body, err = json.Marshal(snap)
		if err != nil {
			s.writeProcessorError(w, r, err)
			return
		}
	case "live":
		live, err := s.cfg.Processors.LiveSnapshot(ctx, path, slug)
		if err != nil {
			s.writeProcessorError(w, r, err)
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
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
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

func liveSeedJSON(live foldstream.LiveSnapshot) []byte {
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

func (s *Server) writeProcessorError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, ok := statusOf(err)
	switch {
	case ok:
		w.Header().Set(HeaderErrorCode, string(code))
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, status, err.Error())
	case r.Context().Err() != nil:
	default:
		if code != "" {
			w.Header().Set(HeaderErrorCode, string(code))
		}
		s.log.Error("processor request failed", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}

// liveDelta is the part of a live-state delta event's payload the SSE route forwards.
type liveDelta struct {
	Key   string          `json:"key"`
	From  int64           `json:"from"`
	To    int64           `json:"to"`
	Patch json.RawMessage `json:"patch"`
}

// serveLiveStateSSE streams a processor's live state: a "seed" event {rev, state}, then one
// "delta" event {from, to, patch} per change, each applying to the state at rev from (RFC 6902
// patch). When a delta cannot be applied in order (a null patch, a missed delta) the server sends a
// fresh seed instead, so a client only ever needs: on seed, replace; on delta, apply. Keep-alive
// comments every LongPollTimeout; the connection ends after SSEMaxDuration (reconnect and
// re-seed).
func (s *Server) serveLiveStateSSE(w http.ResponseWriter, r *http.Request, path, slug string) {
	ctx := r.Context()
	deltas := make(chan liveDelta, 256)
	overflow := make(chan struct{}, 1)
	sub, err := s.st.Subscribe(path, func(_ context.Context, events []foldstream.Event, _ foldstream.ScannedRange) error {
		for _, ev := range events {
			var d liveDelta
			if ev.Type != foldstream.LiveStateChangedType || json.Unmarshal(ev.Payload, &d) != nil || d.Key != slug {
				continue
			}
			select {
			case deltas <- d:
			default:
				select {
				case overflow <- struct{}{}:
				default:
				}
			}
		}
		return nil
	}, stream.SubscribeOptions{Consumes: []string{foldstream.LiveStateChangedType}, Name: "http-live-state " + slug})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	defer sub.Close()
	live, err := s.cfg.Processors.LiveSnapshot(ctx, path, slug)
	if err != nil {
		s.writeProcessorError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var buf bytes.Buffer
	sendSeed := func() bool {
		buf.WriteString("event: seed\ndata:")
		buf.Write(liveSeedJSON(live))
		buf.WriteString("\n\n")
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		return err == nil && rc.Flush() == nil
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
		l, err := s.cfg.Processors.LiveSnapshot(ctx, path, slug)
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
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-overflow:
			for len(deltas) > 0 {
				<-deltas
			}
			if !reseed() {
				return
			}
		case d := <-deltas:
			if d.To <= held {
				continue // already in the seed
			}
			if d.From != held || len(d.Patch) == 0 || string(d.Patch) == "null" {
				if !reseed() {
					return
				}
				continue
			}
			buf.WriteString(`event: delta` + "\n" + `data:{"from":`)
			buf.WriteString(strconv.FormatInt(d.From, 10))
			buf.WriteString(`,"to":`)
			buf.WriteString(strconv.FormatInt(d.To, 10))
			buf.WriteString(`,"patch":`)
			if err := json.Compact(&buf, d.Patch); err != nil {
				buf.Reset()
				if !reseed() {
					return
				}
				continue
			}
			buf.WriteString("}\n\n")
			if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
				return
			}
			buf.Reset()
			held = d.To
		}
	}
}
