package server

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// This file bounds what clients can hold: live readers, request-body bytes in flight, slow
// bodies, slow readers and connections (docs/server.md#limits).

// acquireLiveReader counts a live reader (long-poll, SSE, live-state SSE) in, or answers 503
// OVERLOADED past MaxLiveReaders and returns false. A true return must be paired with
// releaseLiveReader.
func (s *Server) acquireLiveReader(w http.ResponseWriter) bool {
	if s.cfg.MaxLiveReaders < 0 {
		return true
	}
	if s.liveReaders.Add(1) > int64(s.cfg.MaxLiveReaders) {
		s.liveReaders.Add(-1)
		writeCoded(w, foldtype.CodeOverloaded, "too many live readers: retry later", overloadRetryAfter)
		return false
	}
	return true
}

func (s *Server) releaseLiveReader() {
	if s.cfg.MaxLiveReaders >= 0 {
		s.liveReaders.Add(-1)
	}
}

// overloadRetryAfter is the Retry-After (seconds) of OVERLOADED answers.
const overloadRetryAfter = 2

// refuseTooLarge answers a body over MaxBodyBytes: 413 TOO_LARGE stating the limit, in the
// detail and in the limit member (bytes).
func (s *Server) refuseTooLarge(w http.ResponseWriter) {
	limit := s.cfg.MaxBodyBytes
	writeCodedProblem(w, foldtype.CodeTooLarge,
		"request body too large: this server takes at most "+itoa(limit)+" bytes per request; send less in one request",
		0, map[string]any{"limit": limit, "limitUnit": "bytes"})
}

// bodyChunk is the step in which bodies of unknown length are read and their bytes reserved.
const bodyChunk = 32 << 10

// readBody reads the request body under MaxBodyBytes (413 beyond), BodyReadTimeout (a body
// still arriving after it is cut: 408) and MaxBodyBytesInFlight (503 OVERLOADED when the bytes
// held by all requests would pass it). It answers the refusal itself and returns ok=false then;
// otherwise the caller must call release once the body is no longer needed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		s.refuseTooLarge(w)
		return nil, nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		// No body (net/http's server hands a request without one http.NoBody): nothing to
		// reserve, time or read.
		return nil, noRelease, true
	}
	if s.cfg.BodyReadTimeout > 0 {
		// Errors mean the connection cannot take deadlines (some test recorders); then the
		// http.Server's own ReadTimeout is the only bound.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
	}
	var reserved int64
	release = func() {
		if reserved > 0 {
			s.bodyBytes.Add(-reserved)
			reserved = 0
		}
	}
	reserve := func(n int64) bool {
		if s.cfg.MaxBodyBytesInFlight < 0 || n <= 0 {
			return true
		}
		if s.bodyBytes.Add(n) > s.cfg.MaxBodyBytesInFlight {
			s.bodyBytes.Add(-n)
			return false
		}
		reserved += n
		return true
	}
	overloaded := func() ([]byte, func(), bool) {
		release()
		// The body is left unread: close the connection after the answer, or Go's server would
		// first read the rest of a small body, holding the refusal until the client sent it all.
		w.Header().Set("Connection", "close")
		writeCoded(w, foldtype.CodeOverloaded, "too many request bytes in flight: retry later", overloadRetryAfter)
		return nil, nil, false
	}
	rd := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	var buf []byte
	if r.ContentLength >= 0 {
		if !reserve(r.ContentLength) {
			return overloaded()
		}
		buf = make([]byte, 0, r.ContentLength+1) // +1 lets ReadAll see EOF without growing
	}
	for {
		if len(buf) == cap(buf) {
			grow := int64(min(max(cap(buf), bodyChunk), int(s.cfg.MaxBodyBytes)+1))
			if r.ContentLength < 0 && !reserve(grow) {
				return overloaded()
			}
			buf = append(buf, make([]byte, grow)...)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			release()
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				s.refuseTooLarge(w)
			case errors.As(err, &ne) && ne.Timeout():
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusRequestTimeout, "request body too slow: it must arrive within "+s.cfg.BodyReadTimeout.String())
			default:
				writeError(w, http.StatusBadRequest, "could not read the request body")
			}
			return nil, nil, false
		}
	}
	if s.cfg.BodyReadTimeout > 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	return buf, release, true
}

// noRelease is readBody's release of a request without a body.
func noRelease() {}

// liveWriter writes a live response (long-poll, SSE) with a deadline on every write: the write
// must finish within WriteTimeout, and never after the connection's end (SSEMaxDuration for
// SSE), so a client that stops reading is cut instead of holding its buffers.
type liveWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	end time.Time // zero: no overall end
	to  time.Duration
}

func newLiveWriter(w http.ResponseWriter, writeTimeout time.Duration, end time.Time) *liveWriter {
	return &liveWriter{w: w, rc: http.NewResponseController(w), end: end, to: writeTimeout}
}

// deadline sets the write deadline for the next write.
func (lw *liveWriter) deadline() {
	d := time.Now().Add(lw.to)
	if !lw.end.IsZero() && lw.end.Before(d) {
		d = lw.end
	}
	_ = lw.rc.SetWriteDeadline(d)
}

// send writes b and flushes it, reporting success.
func (lw *liveWriter) send(b []byte) bool {
	lw.deadline()
	if _, err := lw.w.Write(b); err != nil {
		return false
	}
	return lw.rc.Flush() == nil
}

// writeHeader writes the status line and headers and flushes them.
func (lw *liveWriter) writeHeader(status int) bool {
	lw.deadline()
	lw.w.WriteHeader(status)
	return lw.rc.Flush() == nil
}

// LimitListener wraps l so that at most Config.MaxConnections connections are open at once.
// A connection past the limit is answered "503 Service Unavailable" with Retry-After and closed
// at once, so clients back off instead of waiting in the kernel's queue. HTTPServer uses it
// through Serve; call it yourself when you run your own http.Server.
func (s *Server) LimitListener(l net.Listener) net.Listener {
	if s.cfg.MaxConnections < 0 {
		return l
	}
	return &limitListener{Listener: l, max: int64(s.cfg.MaxConnections), log: s.log}
}

type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	log     *slog.Logger
	warned  atomic.Int64 // unix seconds of the last warning
	refused atomic.Int64 // refused since the last warning
}

// overloadResponse is what a connection past the limit reads before it is closed: a 503
// OVERLOADED problem, with a request id of its own (no request was read).
func overloadResponse() string {
	id := newRequestID()
	code := string(foldtype.CodeOverloaded)
	body, _ := json.Marshal(map[string]any{"type": ProblemTypePrefix + code, "title": problemTitle(foldtype.CodeOverloaded),
		"status": http.StatusServiceUnavailable, "detail": "too many connections: retry later", "code": code,
		"requestId": id, "retryAfter": overloadRetryAfter})
	return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + ProblemContentType + "\r\n" +
		"Retry-After: " + itoa(overloadRetryAfter) + "\r\n" + HeaderErrorCode + ": " + code + "\r\n" +
		HeaderRequestID + ": " + id + "\r\n" +
		"Connection: close\r\nContent-Length: " + itoa(int64(len(body)+1)) + "\r\n\r\n" + string(body) + "\n"
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		now := time.Now().Unix()
		if last := l.warned.Load(); now-last >= 10 && l.warned.CompareAndSwap(last, now) {
			l.log.Warn("connection limit reached: refusing connections", "max_connections", l.max, "refused", l.refused.Swap(0))
		}
		go refuseConn(c)
	}
}

// refuseConn answers a connection past the limit and closes it. It half-closes first and reads
// (briefly, a little) what the client sent, so the close does not reset the connection and
// discard the answer before the client reads it.
func refuseConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, overloadResponse())
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
	_ = c.Close()
}

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
