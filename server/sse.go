package server

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/foldstream/foldstream/stream"
)

// isTextual reports whether SSE carries a content type as text (text/* and JSON) rather than
// base64 (docs/server.md#sse).
func isTextual(contentType string) bool {
	mt := stream.MediaType(contentType)
	return len(mt) >= 5 && mt[:5] == "text/" || mt == "application/json"
}

// appendDataLines writes payload as data: lines, starting a new line at every CR, LF and CRLF, so
// no payload can inject SSE fields (docs/server.md#sse).
func appendDataLines(b *bytes.Buffer, payload []byte) {
	b.WriteString("data:")
	for i := 0; i < len(payload); i++ {
		switch c := payload[i]; c {
		case '\r':
			if i+1 < len(payload) && payload[i+1] == '\n' {
				i++
			}
			b.WriteString("\ndata:")
		case '\n':
			b.WriteString("\ndata:")
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\n')
}

// sseControl renders a control event (docs/server.md#sse): compact JSON, fields in a fixed order.
func sseControl(b *bytes.Buffer, next int64, cursor string, upToDate, closed bool) {
	b.WriteString("event: control\ndata:{\"streamNextOffset\":\"")
	b.WriteString(FormatOffset(next))
	b.WriteByte('"')
	if cursor != "" && !closed {
		b.WriteString(",\"streamCursor\":\"")
		b.WriteString(cursor)
		b.WriteByte('"')
	}
	if upToDate || closed {
		b.WriteString(",\"upToDate\":true")
	}
	if closed {
		b.WriteString(",\"streamClosed\":true")
	}
	b.WriteString("}\n\n")
}

// serveSSE answers GET live=sse (docs/server.md#sse): per batch one data event and one control event; a
// control event when caught up; keep-alives every LongPollTimeout; the final streamClosed control
// event and then the end; connections cycled after SSEMaxDuration.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, name string, q readQuery) {
	ctx := r.Context()
	// The first answer may claim upToDate: on a shared database it reads the database, not the
	// tail cache, which follows other nodes' commits by notification (docs/postgres.md#live-reads).
	shared := !s.st.Driver().Exclusive()
	first, err := s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: q.after, AtTail: q.now, MaxBytes: s.cfg.LiveChunkBytes, Watch: true, Fresh: shared})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	textual := isTextual(first.Info.ContentType)
	out := w.Header()
	out.Set("Content-Type", "text/event-stream")
	out.Set("Cache-Control", "no-cache")
	out.Set("X-Accel-Buffering", "no")
	if !textual {
		out.Set("stream-sse-data-encoding", "base64")
	}
	// Every write must finish within WriteTimeout and before the connection's end, so a
	// client that stops reading is cut (docs/server.md#limits).
	lw := newLiveWriter(w, s.cfg.WriteTimeout, time.Now().Add(s.cfg.SSEMaxDuration))
	if !lw.writeHeader(http.StatusOK) {
		return
	}

	cursor := q.cursor
	deadline := time.NewTimer(s.cfg.SSEMaxDuration)
	defer deadline.Stop()
	keepAlive := time.NewTimer(s.cfg.LongPollTimeout)
	defer keepAlive.Stop()
	var buf bytes.Buffer
	// rbuf is the memory each read's answer is built in: without it a JSON read would start
	// from a fresh buffer of LiveChunkBytes per event.
	rbuf := make([]byte, 0, sseReadBufferBytes)
	send := func() bool {
		ok := lw.send(buf.Bytes())
		buf.Reset()
		if buf.Cap() > idleBufferBytes {
			buf = bytes.Buffer{} // an idle connection keeps a small buffer, not its largest event
		}
		return ok
	}

	after := q.after
	res := first
	sentAny := false
	haveFresh := false // res is a confirming read's data, not a watched read's
	if q.now {
		after = res.Next
	}
	for {
		if !q.now && (res.Count > 0 || res.Next > after) {
			if textual && !res.UpToDate {
				// A chunk cut inside a record may end inside a UTF-8 sequence; end the event on a
				// character boundary and send the rest with the next one.
				if keep := utf8Boundary(res.Body); keep < len(res.Body) && keep > 0 {
					res.Next -= int64(len(res.Body) - keep)
					res.Body = res.Body[:keep]
				}
			}
			buf.WriteString("event: data\n")
			if textual {
				appendDataLines(&buf, res.Body)
			} else {
				appendDataLines(&buf, []byte(base64.StdEncoding.EncodeToString(res.Body)))
			}
			buf.WriteByte('\n')
			closed := res.Info.Closed && res.UpToDate
			cursor = nextCursor(s.cfg.Clock.Now(), cursor)
			sseControl(&buf, res.Next, cursor, res.UpToDate, closed)
			if !send() || closed {
				return
			}
			sentAny = true
			after = res.Next
		} else {
			q.now = false
			closed := res.Info.Closed && res.UpToDate
			if closed || !sentAny {
				cursor = nextCursor(s.cfg.Clock.Now(), cursor)
				sseControl(&buf, res.Next, cursor, true, closed)
				if !send() || closed {
					return
				}
				sentAny = true
			}
			if !keepAlive.Stop() {
				select {
				case <-keepAlive.C:
				default:
				}
			}
			keepAlive.Reset(s.cfg.LongPollTimeout)
		wait:
			for {
				select {
				case <-res.Changed:
					break wait
				case <-ctx.Done():
					return
				case <-deadline.C:
					return
				case <-s.stopping:
					return
				case <-keepAlive.C:
					if shared {
						// Before claiming upToDate again, confirm the tail with the database: a
						// notification may be late, or lost with a connection this node does not
						// yet know is dead.
						fresh, err := s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: after, MaxBytes: s.cfg.LiveChunkBytes})
						if err != nil {
							return // the database does not answer: end the connection, the client reconnects
						}
						if fresh.Count > 0 || fresh.Next > after {
							res, haveFresh = fresh, true
							break wait
						}
					}
					cursor = nextCursor(s.cfg.Clock.Now(), cursor)
					sseControl(&buf, res.Next, cursor, true, false)
					if !send() {
						return
					}
					keepAlive.Reset(s.cfg.LongPollTimeout)
				}
			}
		}
		select {
		case <-deadline.C:
			return
		default:
		}
		if haveFresh {
			haveFresh = false // the confirming read's data: send it, then watch again
			continue
		}
		var err error
		res, err = s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: after, MaxBytes: s.cfg.LiveChunkBytes, Watch: true, Buf: rbuf})
		if err != nil {
			return // deleted or expired meanwhile: end the connection
		}
		// The answer is encoded into buf before the next read: its memory serves that read,
		// unless it grew past what an idle connection keeps.
		if c := cap(res.Body); c >= cap(rbuf) && c <= idleBufferBytes {
			rbuf = res.Body[:0]
		}
	}
}

// idleBufferBytes is the largest event buffer a live connection keeps between events.
const idleBufferBytes = 4 << 10

// sseReadBufferBytes is the read buffer an SSE connection starts with (it keeps one up to
// idleBufferBytes).
const sseReadBufferBytes = 1 << 10

// utf8Boundary returns the length of b without a trailing incomplete UTF-8 sequence.
func utf8Boundary(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}
