package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/console"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Routes beyond the Durable Streams protocol that a console (or an operator's script) needs; see
// docs/server.md#stream-listing.
const (
	// ListPath lists streams: GET ListPath?prefix=…&after=…&limit=….
	ListPath = "/v1/streams"
	// InfoPath describes one stream and the processors running on it: GET InfoPath?path=….
	InfoPath = "/v1/streams/info"
	// DefaultListLimit is the page size of ListPath when the request names none.
	DefaultListLimit = stream.DefaultListLimit
	// MaxListLimit is the largest page ListPath answers.
	MaxListLimit = stream.MaxListLimit
)

// StreamEntry is one stream in the answers of ListPath and InfoPath.
type StreamEntry struct {
	// Path is the stream's store path ("/orders" is served at /v1/stream/orders).
	Path string `json:"path"`
	// ContentType is the content type given at creation.
	ContentType string `json:"contentType"`
	// Tail is the offset after the last message (a protocol offset: read from it to follow).
	Tail string `json:"tail"`
	// Closed reports whether the stream is closed.
	Closed bool `json:"closed"`
	// CreatedAt is when the stream was created (RFC 3339, milliseconds, UTC).
	CreatedAt string `json:"createdAt"`
	// Paused reports whether the stream is paused (docs/server.md#paused-streams); PauseReason
	// is then the reason appends are refused with.
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
}

// StreamList is the answer of ListPath: one page of streams in path order and, when there may be
// more, the cursor to pass as after for the next page.
type StreamList struct {
	// Streams is the page.
	Streams []StreamEntry `json:"streams"`
	// Next, when not empty, is the after value of the next page.
	Next string `json:"next,omitempty"`
}

// StreamDetail is the answer of InfoPath.
type StreamDetail struct {
	StreamEntry
	// Processors lists the processors running on the stream, sorted by slug: [] when none
	// does, null when the server has no processor host (Config.Processors).
	Processors []foldtype.ProcessorStatus `json:"processors"`
}

func entryOf(info stream.StreamInfo) StreamEntry {
	return StreamEntry{
		Path:        info.Path,
		ContentType: info.ContentType,
		Tail:        FormatOffset(info.Tail),
		Closed:      info.Closed,
		CreatedAt:   time.UnixMilli(info.CreatedMs).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		Paused:      info.Paused,
		PauseReason: info.PauseReason,
	}
}

// servesExtra reports whether p is one of the routes of this file (the console, the listing, the
// stream information) or the processor listing (processorlist.go), and not a stream or processor
// path.
func (s *Server) servesExtra(p string) bool {
	if strings.HasPrefix(p, s.cfg.Prefix) || (s.cfg.Processors != nil && strings.HasPrefix(p, s.cfg.ProcessorPrefix)) {
		return false
	}
	return p == ListPath || p == InfoPath || (p == ProcessorsPath && s.cfg.Processors != nil) ||
		(!s.cfg.DisableConsole && console.Serves(p))
}

// serveExtra serves the routes servesExtra accepts. All of them only read. The listing and the
// stream information go through the origin check and Config.Authorize like every read (OpList on
// the prefix, OpRead on the stream); the console's files hold no data and need no credentials.
func (s *Server) serveExtra(w http.ResponseWriter, r *http.Request) {
	if !readOnly(r.Method) {
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, "this route only reads: use GET")
		return
	}
	switch r.URL.Path {
	case ListPath:
		s.serveList(w, r)
	case InfoPath:
		s.serveInfo(w, r)
	case ProcessorsPath:
		s.serveProcessorList(w, r) // processorlist.go
	default:
		// The console's files hold no data: every request the page makes goes through the
		// routes above and the protocol's, with the reader's credentials.
		s.console.ServeHTTP(w, r)
	}
}

// serveList answers GET ListPath?prefix=…&after=…&limit=…: a StreamList.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string")
		return
	}
	prefix := q.Get("prefix")
	authPath := prefix
	if authPath == "" {
		authPath = "/"
	}
	if !s.checkOrigin(w, r, OpList) {
		return
	}
	if _, ok := s.authorize(w, r, OpList, authPath); !ok {
		return
	}
	limit := DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			writeError(w, http.StatusBadRequest, "limit must be an integer from 1 to "+strconv.Itoa(MaxListLimit))
			return
		}
		limit = n
	}
	// One more than asked tells whether a next page exists, within the store's page cap.
	infos, err := s.st.Protocol().ListStreams(r.Context(), stream.ListOptions{Prefix: prefix, After: q.Get("after"), Limit: min(limit+1, MaxListLimit)})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := StreamList{Streams: make([]StreamEntry, 0, min(len(infos), limit))}
	for i, info := range infos {
		if i == limit {
			break
		}
		out.Streams = append(out.Streams, entryOf(info))
	}
	if len(infos) > limit || (len(infos) == limit && limit == MaxListLimit) {
		out.Next = out.Streams[len(out.Streams)-1].Path
	}
	writeJSON(w, r, out)
}

// serveInfo answers GET InfoPath?path=…: a StreamDetail (404 for a stream that does not exist).
func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string")
		return
	}
	path := q.Get("path")
	if !strings.HasPrefix(path, "/") {
		writeError(w, http.StatusBadRequest, "path must be a stream's store path, starting with /")
		return
	}
	if !s.checkOrigin(w, r, OpRead) {
		return
	}
	if _, ok := s.authorize(w, r, OpRead, path); !ok {
		return
	}
	info, err := s.st.Protocol().HeadStream(r.Context(), path)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := StreamDetail{StreamEntry: entryOf(info)}
	if s.cfg.Processors != nil {
		if pl, ok := s.cfg.Processors.(ProcessorLister); ok {
			// Offsets read beside the tail they are compared with: never past it.
			out.Processors = durableStatuses(clientStatuses(pl.ProcessorsOn(r.Context(), path)), info.Tail)
		}
		if out.Processors == nil {
			out.Processors = []foldtype.ProcessorStatus{}
		}
	}
	writeJSON(w, r, out)
}

func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b.Bytes())
	}
}
