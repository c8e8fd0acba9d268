package history

import (
	"io"
	"net"
	"sync"
)

// Proxy is a TCP proxy on 127.0.0.1 that a nemesis controls: it can cut every connection
// (closed, new ones refused), or drop what the far side answers while still delivering what the
// near side sends, so requests arrive and run but their answers are lost. Restore ends either.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	mode  proxyMode
}

type proxyMode int

const (
	pass proxyMode = iota
	cut
	dropReplies
)

// NewProxy listens on a free 127.0.0.1 port and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target}
	go p.serve()
	return p, nil
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.mode == cut
		p.mu.Unlock()
		if down {
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
		go func() { io.Copy(replyWriter{p, c}, s); c.Close() }()
	}
}

// replyWriter forwards the far side's bytes unless replies are being dropped.
type replyWriter struct {
	p *Proxy
	c net.Conn
}

func (r replyWriter) Write(b []byte) (int, error) {
	r.p.mu.Lock()
	drop := r.p.mode == dropReplies
	r.p.mu.Unlock()
	if drop {
		return len(b), nil
	}
	return r.c.Write(b)
}

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.mode = cut
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// DropReplies delivers requests but loses every answer until Restore.
func (p *Proxy) DropReplies() {
	p.mu.Lock()
	p.mode = dropReplies
	p.mu.Unlock()
}

// Restore lets traffic through again. Connections that lost answers are closed first: their
// streams are missing bytes and could only mislead whoever reads them next.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == dropReplies {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
	p.mode = pass
}
