// Package faultproxy is a fault-injecting HTTP reverse proxy for tests. It listens on 127.0.0.1 and
// forwards to one target, and for a configurable share of requests it delays them (so concurrent
// requests overtake each other), answers 503 without forwarding, drops the response after the
// target applied the request (the client sees a broken connection), or sends the request to the
// target twice.
package faultproxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets the probability (0..1) of each fault per request.
type Config struct {
	// Delay is the share of requests held for a random time up to MaxDelay before forwarding.
	Delay float64
	// MaxDelay bounds an injected delay.
	MaxDelay time.Duration
	// Unavailable is the share answered 503 (Retry-After: 0) without reaching the target.
	Unavailable float64
	// DropResponse is the share forwarded, applied by the target, and then answered by closing the
	// connection without a response.
	DropResponse float64
	// Duplicate is the share forwarded twice; the client gets the second response.
	Duplicate float64
	// Methods limits the faults to these methods (all methods when empty).
	Methods []string
	// Seed makes the fault sequence reproducible.
	Seed uint64
}

// Stats counts what the proxy did.
type Stats struct {
	Requests, Delayed, Unavailable, Dropped, Duplicated int64
}

// Proxy is a running fault proxy.
type Proxy struct {
	// URL is the proxy's base URL ("http://127.0.0.1:PORT").
	URL string

	cfg    Config
	target string
	ln     net.Listener
	srv    *http.Server
	hc     *http.Client

	mu  sync.Mutex
	rng *rand.Rand

	requests, delayed, unavailable, dropped, duplicated atomic.Int64
}

// Start starts a proxy in front of target (a base URL such as "http://127.0.0.1:4437").
func Start(target string, cfg Config) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	p := &Proxy{
		URL: "http://" + ln.Addr().String(), cfg: cfg, target: target, ln: ln,
		hc:  &http.Client{Transport: t},
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	p.srv = &http.Server{Handler: p}
	go p.srv.Serve(ln)
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.hc.CloseIdleConnections()
	return err
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{Requests: p.requests.Load(), Delayed: p.delayed.Load(), Unavailable: p.unavailable.Load(),
		Dropped: p.dropped.Load(), Duplicated: p.duplicated.Load()}
}

func (p *Proxy) roll(prob float64) bool {
	if prob <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64() < prob
}

func (p *Proxy) randDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.MaxDelay <= 0 {
		return 0
	}
	return time.Duration(p.rng.Int64N(int64(p.cfg.MaxDelay)))
}

func (p *Proxy) faulty(method string) bool {
	if len(p.cfg.Methods) == 0 {
		return true
	}
	for _, m := range p.cfg.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// ServeHTTP forwards one request, injecting faults.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	faulty := p.faulty(r.Method)
	if faulty && p.roll(p.cfg.Delay) {
		p.delayed.Add(1)
		select {
		case <-time.After(p.randDelay()):
		case <-r.Context().Done():
			return
		}
	}
	if faulty && p.roll(p.cfg.Unavailable) {
		p.unavailable.Add(1)
		w.Header().Set("Retry-After", "0")
		http.Error(w, "injected 503", http.StatusServiceUnavailable)
		return
	}
	resp, err := p.forward(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if faulty && p.roll(p.cfg.Duplicate) {
		p.duplicated.Add(1)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp, err = p.forward(r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	defer resp.Body.Close()
	if faulty && p.roll(p.cfg.DropResponse) {
		p.dropped.Add(1)
		io.Copy(io.Discard, resp.Body) // the target has applied the request; lose its answer
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Del("Connection")
	return p.hc.Do(req)
}
