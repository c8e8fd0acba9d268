package client

import (
	"errors"
	"io"
)

// A catch-up response may hold a whole stream (foldstream's server answers a catch-up from any
// offset up to the tail in one response). The reader never holds such a response whole: it reads
// the body in blocks and hands it on in parts of about partBytes — for a JSON stream each part a
// JSON array of whole messages, cut between two messages of the response's array — so a read's
// memory is bounded by a part, whatever the stream's length.

// partBytes is the size at which a response's body is handed on as a part of its own.
const partBytes = 1 << 20

// readBlock is how much of a response body is read at a time.
const readBlock = 64 << 10

// errNotArray is a JSON stream's response body that is not one JSON array.
var errNotArray = errors.New("a JSON stream's response is not a JSON array")

// splitBody reads body and calls part for each part but the last, which it returns. A body that
// fits in one part is returned as it is. With jsonArray, parts are JSON arrays of whole elements of
// the body's array, and a body that is not one array is errNotArray (the parts' own validity is
// the caller's check). part returns false to stop; splitBody then returns io.ErrClosedPipe.
func splitBody(body io.Reader, jsonArray bool, part func([]byte) bool) ([]byte, error) {
	if !jsonArray {
		return splitBytes(body, part)
	}
	s := &arraySplitter{}
	buf := make([]byte, readBlock)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if perr := s.feed(buf[:n]); perr != nil {
				return nil, perr
			}
			for s.ready() {
				if !part(s.take()) {
					return nil, io.ErrClosedPipe
				}
			}
		}
		if err == io.EOF {
			return s.finish()
		}
		if err != nil {
			return nil, err
		}
	}
}

func splitBytes(body io.Reader, part func([]byte) bool) ([]byte, error) {
	var cur []byte
	buf := make([]byte, readBlock)
	for {
		n, err := body.Read(buf)
		cur = append(cur, buf[:n]...)
		if len(cur) >= partBytes && err == nil {
			if !part(cur) {
				return nil, io.ErrClosedPipe
			}
			cur = make([]byte, 0, partBytes+readBlock)
		}
		if err == io.EOF {
			return cur, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// arraySplitter scans a JSON array's text as it arrives and cuts it between elements.
type arraySplitter struct {
	raw     []byte // the whole body so far, while no part was taken (returned as it is when it fits)
	elems   []byte // the elements after the last part taken, joined by their commas, as received
	cut     int    // len(elems) up to the end of the last complete element; -1: none yet
	taken   bool   // a part was taken: finish returns a rebuilt array
	started bool   // the array's '[' was seen
	ended   bool   // its ']' was seen
	depth   int    // nesting inside the array (1: between its elements)
	inStr   bool
	esc     bool
}

func (s *arraySplitter) feed(b []byte) error {
	if !s.taken {
		s.raw = append(s.raw, b...)
	}
	for _, c := range b {
		switch {
		case s.ended:
			if !isSpace(c) {
				return errNotArray
			}
			continue
		case !s.started:
			if isSpace(c) {
				continue
			}
			if c != '[' {
				return errNotArray
			}
			s.started, s.depth, s.cut = true, 1, -1
			continue
		case s.inStr:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
		default:
			switch c {
			case '"':
				s.inStr = true
			case '[', '{':
				s.depth++
			case ']', '}':
				s.depth--
				if s.depth == 0 {
					s.ended = true
					s.cut = len(s.elems)
					continue
				}
			case ',':
				if s.depth == 1 {
					s.cut = len(s.elems)
				}
			}
		}
		s.elems = append(s.elems, c)
	}
	return nil
}

// ready reports whether complete elements worth a part are waiting.
func (s *arraySplitter) ready() bool { return !s.ended && s.cut >= partBytes }

// take returns the complete elements waiting, as a JSON array, and keeps the rest.
func (s *arraySplitter) take() []byte {
	out := make([]byte, 0, s.cut+2)
	out = append(out, '[')
	out = append(out, s.elems[:s.cut]...)
	out = append(out, ']')
	rest := s.elems[s.cut:]
	if len(rest) > 0 && rest[0] == ',' {
		rest = rest[1:]
	}
	s.elems = append(make([]byte, 0, partBytes+readBlock), rest...)
	s.cut = -1
	s.taken, s.raw = true, nil
	return out
}

func (s *arraySplitter) finish() ([]byte, error) {
	if !s.taken {
		if s.started && !s.ended {
			return nil, errNotArray
		}
		return s.raw, nil // as received (an empty body stays empty)
	}
	if !s.ended {
		return nil, errNotArray
	}
	out := make([]byte, 0, len(s.elems)+2)
	out = append(out, '[')
	out = append(out, s.elems...)
	return append(out, ']'), nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
