package client

import (
	"bytes"
	"errors"
	"io"
)

// maxSSELine bounds one SSE line so a misbehaving server cannot make the parser buffer without end.
const maxSSELine = 64 << 20

// errSSELineTooLong reports a line over maxSSELine.
var errSSELineTooLong = errors.New("sse line exceeds 64 MiB")

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	// Type is the event field ("message" when absent).
	Type string
	// Data is the data lines joined with LF, one leading space stripped from each.
	Data []byte
}

// sseParser reads server-sent events. Line endings CRLF, LF and lone CR are all treated as LF
// before lines are split (the seed-001 fix), including a CRLF split across two reads: a CR at the
// end of one read followed by LF at the start of the next is one line end, not two.
type sseParser struct {
	r      io.Reader
	buf    []byte
	start  int
	end    int
	skipLF bool // the previous line ended in CR: a leading LF belongs to it
	err    error
}

func newSSEParser(r io.Reader) *sseParser {
	return &sseParser{r: r, buf: make([]byte, 32<<10)}
}

// line returns the next line without its terminator. The slice is valid until the next call.
// At EOF a final unterminated line is returned first, then io.EOF.
func (p *sseParser) line() ([]byte, error) {
	for {
		if p.skipLF && p.start < p.end {
			if p.buf[p.start] == '\n' {
				p.start++
			}
			p.skipLF = false
		}
		if i := bytes.IndexAny(p.buf[p.start:p.end], "\r\n"); i >= 0 {
			l := p.buf[p.start : p.start+i]
			if p.buf[p.start+i] == '\r' {
				p.skipLF = true
			}
			p.start += i + 1
			return l, nil
		}
		if p.err != nil {
			if p.start < p.end {
				l := p.buf[p.start:p.end]
				p.start = p.end
				return l, nil
			}
			return nil, p.err
		}
		// Compact, grow if full, then read more.
		if p.start > 0 {
			copy(p.buf, p.buf[p.start:p.end])
			p.end -= p.start
			p.start = 0
		}
		if p.end == len(p.buf) {
			if len(p.buf) >= maxSSELine {
				return nil, errSSELineTooLong
			}
			nb := make([]byte, 2*len(p.buf))
			copy(nb, p.buf[:p.end])
			p.buf = nb
		}
		n, err := p.r.Read(p.buf[p.end:])
		p.end += n
		if err != nil {
			p.err = err
		}
	}
}

// next returns the next event. Comments (lines starting with ':'), id and retry fields are
// ignored; an event is dispatched at a blank line when it has data or an event type. A partial
// event cut off by EOF is discarded, as the SSE specification requires.
func (p *sseParser) next() (sseEvent, error) {
	var (
		typ     string
		data    []byte
		hasData bool
	)
	for {
		l, err := p.line()
		if err != nil {
			return sseEvent{}, err
		}
		if len(l) == 0 {
			if hasData || typ != "" {
				if typ == "" {
					typ = "message"
				}
				return sseEvent{Type: typ, Data: data}, nil
			}
			continue
		}
		if l[0] == ':' {
			continue
		}
		field, value := l, []byte(nil)
		if i := bytes.IndexByte(l, ':'); i >= 0 {
			field, value = l[:i], l[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			typ = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
}
