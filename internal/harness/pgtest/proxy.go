package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 to the PostgreSQL server that a test can cut (every
// connection dropped, new ones refused) and restore: the database "goes away" for the
// connections through the proxy only, so tests sharing the server are not disturbed.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   atomic.Bool
	// stalled holds every byte in both directions (Stall) until Resume; gate is signalled on
	// Resume.
	stalled bool
	// repliesStalled holds the server's bytes only (StallReplies): what the client sends arrives.
	repliesStalled bool
	gate           *sync.Cond
	// fromServer counts the bytes the server sent through the proxy.
	fromServer atomic.Int64
}

// NewProxy starts a proxy to the server raw names and returns it with raw rewritten to connect
// through it. The proxy is closed when the test ends.
func NewProxy(t testing.TB, raw string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %s: %v", raw, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: u.Host}
	p.gate = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Resume(); p.Cut() })
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { p.pipe(s, c, false); s.Close() }()
		go func() { p.pipe(countingWriter{c, &p.fromServer}, s, true); c.Close() }()
	}
}

// Cut drops every connection through the proxy and refuses new ones until Restore. It returns how
// many client connections the proxy had let through since the last Cut (the ones it dropped, and
// any that had ended by themselves).
func (p *Proxy) Cut() (cut int) {
	p.down.Store(true)
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	cut = len(p.conns) / 2 // each connection is the client's side and the server's
	p.conns = nil
	p.mu.Unlock()
	return cut
}

// pipe copies src to dst, holding what it reads while the proxy is stalled. It returns when src
// ends (bytes held then are dropped) or dst fails.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled || (replies && p.repliesStalled) {
				p.gate.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall black-holes the connections through the proxy: they stay open, and new ones are accepted,
// but no byte passes in either direction until Resume, as on a network that went dark without
// a reset. The client's kernel sees its data acknowledged (by the proxy), so only the client's
// own deadlines end its waits.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// StallReplies holds what the server sends until Resume, and lets what clients send through: a
// COMMIT reaches the server and is written, and its answer does not come back.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	p.repliesStalled = true
	p.mu.Unlock()
}

// Resume lets the bytes held since Stall or StallReplies through, and every later one.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled, p.repliesStalled = false, false
	p.gate.Broadcast()
	p.mu.Unlock()
}

// Restore lets new connections through again.
func (p *Proxy) Restore() { p.down.Store(false) }

// BytesFromServer returns how many bytes the server has sent to clients through the proxy: what
// a test measures to check how much a query reads off the connection.
func (p *Proxy) BytesFromServer() int64 { return p.fromServer.Load() }

// countingWriter counts what it writes.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}
