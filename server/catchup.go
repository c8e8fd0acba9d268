package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream"
)

// A catch-up GET (no live parameter) answers everything from the requested offset up to the tail
// it observed when it started, in one response, however long the stream is
// (docs/server.md#catch-up-reads). When the first page does not reach that tail, the headers
// describe the whole response — Stream-Next-Offset is that tail, Stream-Up-To-Date is true and
// Stream-Closed is set when the stream was closed at the start (a closed stream's tail never
// moves) — and the body is written page by page as the store returns it, so the memory a
// response holds is one page (Config.ReadChunkBytes), not the stream.

// streamCatchUp writes the rest of a catch-up read whose first page, first, stopped short of
// the tail. It returns after the last byte, or when the client went away.
func (s *Server) streamCatchUp(w http.ResponseWriter, r *http.Request, name string, after int64, first stream.ReadResult) {
	info := first.Info
	target := info.Tail
	out := w.Header()
	out.Set("Content-Type", info.ContentType)
	out.Set(wire.HeaderStreamNextOffset, FormatOffset(target))
	out.Set(wire.HeaderStreamUpToDate, "true")
	if info.Closed {
		out.Set(wire.HeaderStreamClosed, "true")
	}
	tag := etag(info, after, stream.ReadResult{Info: info, Next: target, UpToDate: true})
	out.Set("ETag", tag)
	if info.Closed {
		out.Set("Cache-Control", "public, max-age=60, stale-while-revalidate=300")
	} else {
		out.Set("Cache-Control", "no-cache")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}

	ctx := r.Context()
	// Every page must be taken by the client within WriteTimeout, as live responses must, so a
	// client that stops reading is cut instead of holding a page.
	lw := newLiveWriter(w, s.cfg.WriteTimeout, time.Time{})
	wroteMessage := false // JSON: whether a message is in the array yet (for the commas)
	write := func(body []byte) bool {
		if info.JSON {
			elems := arrayElements(body)
			if len(elems) == 0 {
				return true
			}
			lw.deadline()
			if wroteMessage {
				if _, err := w.Write([]byte{','}); err != nil {
					return false
				}
			}
			wroteMessage = true
			body = elems
		}
		return lw.send(body)
	}
	if info.JSON {
		lw.deadline()
		if _, err := w.Write([]byte{'['}); err != nil {
			return
		}
	}
	// The next page is read while this one is written (one page ahead, on its own goroutine), so
	// the store's time per page — on PostgreSQL a transaction and the database sending the
	// records — overlaps the socket's instead of adding to it. Two page buffers serve every page.
	pages, stop := s.prefetchPages(ctx, name, info, first.Next, target)
	defer stop()
	if !write(first.Body) {
		return
	}
	for p := range pages {
		if p.err != nil {
			// The client went away, or the stream was deleted or replaced while we answered, or
			// (never expected) the store made no progress: the status line is sent, so the only
			// honest signal left is to cut the connection, which a client reports as an error
			// rather than taking a truncated body as complete.
			if ctx.Err() == nil {
				s.log.Warn("catch-up read cut short", "path", name, "offset", FormatOffset(p.at), "error", p.err)
			}
			stop()
			panic(http.ErrAbortHandler)
		}
		ok := write(p.body)
		p.done()
		if !ok {
			return
		}
	}
	if info.JSON {
		lw.send([]byte{']'})
	}
}

// catchUpPage is one page of a catch-up read taken from the store: its body up to the target, or
// the error that ended the read at position at. done hands its buffer back for a later page.
type catchUpPage struct {
	body []byte
	at   int64
	err  error
	done func()
}

// errNoProgress reports a store read that returned nothing short of the target.
var errNoProgress = errors.New("the store returned no data short of the tail")

// prefetchPages reads the pages of a catch-up read after cur up to target on a goroutine of its
// own, one page ahead of the consumer: the channel holds at most one page, and the goroutine reads
// into one of two buffers, so a page's memory is reused only after its done was called. A page
// with err ends the channel. stop ends the reads and waits for the goroutine; call it before
// returning (it may be called more than once).
func (s *Server) prefetchPages(ctx context.Context, name string, info stream.StreamInfo, cur, target int64) (<-chan catchUpPage, func()) {
	ctx, cancel := context.WithCancel(ctx)
	pages := make(chan catchUpPage, 1)
	free := make(chan []byte, 2)
	for range 2 {
		// One page and its last message (a JSON page may end past ReadChunkBytes by one).
		free <- make([]byte, 0, s.cfg.ReadChunkBytes+64<<10)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pages)
		for cur < target {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			page, err := s.st.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: name, After: cur, MaxBytes: s.cfg.ReadChunkBytes, Buf: buf})
			if err == nil && page.Info.CreatedMs != info.CreatedMs {
				err = errStreamReplaced
			} else if err == nil && page.Count == 0 && page.Next <= cur {
				err = errNoProgress
			}
			body := page.Body
			if err == nil && page.Next > target {
				// The stream grew since the request started: keep only what lies up to target.
				body, err = s.cutAt(ctx, name, info, cur, target, page)
			}
			if err != nil {
				select {
				case pages <- catchUpPage{at: cur, err: err, done: func() {}}:
				case <-ctx.Done():
				}
				return
			}
			back := page.Body[:0]
			select {
			case pages <- catchUpPage{body: body, at: cur, done: func() { free <- back }}:
			case <-ctx.Done():
				return
			}
			cur = page.Next
		}
	}()
	return pages, func() { cancel(); wg.Wait() }
}

// errStreamReplaced reports a stream deleted or replaced during a catch-up read.
var errStreamReplaced = errors.New("the stream was deleted or replaced during the read")

// cutAt returns the part of page (read after cur) that lies at or before target. Byte streams
// count positions in bytes, so that is a prefix of target-cur bytes. A JSON stream counts
// messages, but its positions can have holes (an ephemeral event takes a position and stores
// nothing), so the messages' positions come from the store's event view; the result is then the
// first that many messages, as a JSON array.
func (s *Server) cutAt(ctx context.Context, name string, info stream.StreamInfo, cur, target int64, page stream.ReadResult) ([]byte, error) {
	if !info.JSON {
		return page.Body[:min(int64(len(page.Body)), target-cur)], nil
	}
	keep := 0
	for after := cur; after < target; {
		ev, err := s.st.Events().Stream(name).Read(ctx, after, stream.MaxReadLimit)
		if err != nil {
			return nil, err
		}
		for _, e := range ev.Events {
			if e.Offset > target {
				return firstElements(page.Body, keep)
			}
			keep++
			after = e.Offset
		}
		if len(ev.Events) == 0 {
			break
		}
	}
	return firstElements(page.Body, keep)
}

// firstElements returns a JSON array holding the first n elements of the array body.
func firstElements(body []byte, n int) ([]byte, error) { return rawjson.CutArray(body, n) }

// arrayElements returns the elements of a JSON array as written by the store ("[a,b]" gives
// "a,b"), or nil when it is empty.
func arrayElements(body []byte) []byte {
	body = bytes.TrimSpace(body)
	if len(body) < 2 {
		return nil
	}
	return bytes.TrimSpace(body[1 : len(body)-1])
}
