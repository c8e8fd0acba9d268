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
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Cut() })
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
		go func() { io.Copy(s, c); s.Close() }()
		go func() { io.Copy(countingWriter{c, &p.fromServer}, s); c.Close() }()
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
