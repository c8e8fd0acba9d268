package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// rawConn is one keep-alive HTTP/1.1 connection that the load generator drives by hand, for the
// creation scenario: a request is one prepared write, its answer is read with one buffered reader
// on the caller's goroutine. net/http's client costs about as much CPU per small request as the
// server it measures (a reader and a writer goroutine per connection and a hand-over to each per
// request, header maps, a pool); on two shared cores that CPU is taken from the server, so the
// leaner instrument lets every server show more of its own rate. The bytes on the wire are what
// net/http sends for the same request, less its User-Agent.
//
// It understands what a server may answer: Content-Length or chunked bodies, interim 1xx
// answers, and Connection: close (the next request dials again).
type rawConn struct {
	addr string // host:port
	host string // the Host header
	conn net.Conn
	br   *bufio.Reader
	req  []byte
	// deadline is the connection's I/O deadline (the caller's context deadline), zero for none.
	deadline time.Time
}

// rawConnTo prepares a connection to the server at base (http://host:port); it dials on first use.
func rawConnTo(base string) (*rawConn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("raw HTTP client: %q is not an http://host:port base", base)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &rawConn{addr: addr, host: u.Host}, nil
}

// Close closes the connection.
func (r *rawConn) Close() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

func (r *rawConn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return err
	}
	r.deadline, _ = ctx.Deadline()
	if !r.deadline.IsZero() {
		if err := c.SetDeadline(r.deadline); err != nil {
			c.Close()
			return err
		}
	}
	r.conn = c
	if r.br == nil {
		r.br = bufio.NewReaderSize(c, 16<<10)
	} else {
		r.br.Reset(c)
	}
	return nil
}

// put sends PUT {path} with Content-Type ct and no body, and returns the answer's status and, for
// a status other than 200 and 201, the start of its body.
func (r *rawConn) put(ctx context.Context, path, ct string) (int, string, error) {
	r.req = append(r.req[:0], "PUT "...)
	r.req = append(r.req, path...)
	r.req = append(r.req, " HTTP/1.1\r\nHost: "...)
	r.req = append(r.req, r.host...)
	r.req = append(r.req, "\r\nContent-Type: "...)
	r.req = append(r.req, ct...)
	r.req = append(r.req, "\r\nContent-Length: 0\r\n\r\n"...)
	return r.roundTrip(ctx)
}

func (r *rawConn) roundTrip(ctx context.Context) (int, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, "", err
	}
	if r.conn != nil {
		if d, _ := ctx.Deadline(); !d.Equal(r.deadline) {
			r.Close() // another caller's deadline: dial afresh with this one
		}
	}
	fresh := r.conn == nil
	if fresh {
		if err := r.dial(ctx); err != nil {
			return 0, "", err
		}
	}
	status, body, keep, err := r.exchange()
	if err != nil && !fresh && errors.Is(err, errStale) {
		// The server closed an idle keep-alive connection before reading the request: once more
		// on a new connection (net/http's client does the same for a request it never sent).
		r.Close()
		if err := r.dial(ctx); err != nil {
			return 0, "", err
		}
		status, body, keep, err = r.exchange()
	}
	if err != nil || !keep {
		r.Close()
	}
	return status, body, err
}

// errStale marks a connection that ended before any byte of an answer arrived.
var errStale = errors.New("raw HTTP client: connection closed before the answer")

// exchange writes the prepared request and reads one answer.
func (r *rawConn) exchange() (status int, body string, keep bool, err error) {
	if _, err := r.conn.Write(r.req); err != nil {
		return 0, "", false, fmt.Errorf("%w: %v", errStale, err)
	}
	for {
		status, keep, n, chunked, err := r.readHead()
		if err != nil {
			return 0, "", false, err
		}
		if status >= 100 && status < 200 {
			continue // an interim answer: the real one follows
		}
		keepBody := status != 200 && status != 201
		body, err := r.readBody(n, chunked, keepBody)
		if err != nil {
			return status, "", false, err
		}
		if n < 0 && !chunked {
			keep = false // the body ran to the connection's end
		}
		return status, body, keep, nil
	}
}

// readHead reads a status line and headers. n is the Content-Length (-1: none given).
func (r *rawConn) readHead() (status int, keep bool, n int64, chunked bool, err error) {
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && (err == io.EOF || errors.Is(err, net.ErrClosed) || isReset(err)) {
			return 0, false, 0, false, errStale
		}
		return 0, false, 0, false, fmt.Errorf("raw HTTP client: read status line: %w", err)
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, 0, false, fmt.Errorf("raw HTTP client: malformed status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, 0, false, fmt.Errorf("raw HTTP client: malformed status line %q", line)
	}
	keep = line[7] == '1' // HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes it
	n = -1
	for {
		h, err := r.br.ReadSlice('\n')
		if err != nil {
			return 0, false, 0, false, fmt.Errorf("raw HTTP client: read headers: %w", err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, false, 0, false, fmt.Errorf("raw HTTP client: malformed header %q", h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || v < 0 {
				return 0, false, 0, false, fmt.Errorf("raw HTTP client: malformed Content-Length %q", value)
			}
			n = v
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			if asciiEqualFold(value, "close") {
				keep = false
			} else if asciiEqualFold(value, "keep-alive") {
				keep = true
			}
		}
	}
	if status == 204 || status == 304 || (status >= 100 && status < 200) {
		n, chunked = 0, false // no body, whatever the headers say
	}
	return status, keep, n, chunked, nil
}

// maxKeptBody is how much of an unexpected answer's body is kept for the error message.
const maxKeptBody = 512

// readBody reads (and discards, unless keep) a body of n bytes, a chunked one, or — with neither
// — one that runs to the connection's end.
func (r *rawConn) readBody(n int64, chunked, keep bool) (string, error) {
	var kept []byte
	take := func(n int64) error {
		for n > 0 {
			step := min(n, int64(r.br.Size()))
			b, err := r.br.Peek(int(step))
			if len(b) == 0 && err != nil {
				return fmt.Errorf("raw HTTP client: read body: %w", err)
			}
			if keep && len(kept) < maxKeptBody {
				kept = append(kept, b[:min(len(b), maxKeptBody-len(kept))]...)
			}
			r.br.Discard(len(b))
			n -= int64(len(b))
		}
		return nil
	}
	switch {
	case chunked:
		for {
			line, err := r.br.ReadSlice('\n')
			if err != nil {
				return "", fmt.Errorf("raw HTTP client: read chunk size: %w", err)
			}
			size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
			sz, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
			if err != nil || sz < 0 {
				return "", fmt.Errorf("raw HTTP client: malformed chunk size %q", line)
			}
			if sz == 0 {
				// Trailers, then the empty line.
				for {
					t, err := r.br.ReadSlice('\n')
					if err != nil {
						return "", fmt.Errorf("raw HTTP client: read trailer: %w", err)
					}
					if len(bytes.TrimRight(t, "\r\n")) == 0 {
						return string(kept), nil
					}
				}
			}
			if err := take(sz); err != nil {
				return "", err
			}
			if _, err := r.br.Discard(2); err != nil { // the chunk's CRLF
				return "", fmt.Errorf("raw HTTP client: read chunk end: %w", err)
			}
		}
	case n >= 0:
		return string(kept), take(n)
	default:
		for {
			b, err := r.br.Peek(1)
			if len(b) == 0 {
				if err == io.EOF {
					return string(kept), nil
				}
				return "", fmt.Errorf("raw HTTP client: read body: %w", err)
			}
			if err := take(int64(r.br.Buffered())); err != nil {
				return "", err
			}
		}
	}
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// isReset reports whether err is the peer resetting the connection.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
