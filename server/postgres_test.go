package server_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream"
)

// cutProxy forwards TCP to the PostgreSQL server until cut: then every connection drops and new
// ones are refused until restore — the database "goes away" for one node only.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   atomic.Bool
}

func (p *cutProxy) serve() {
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
		go func() { io.Copy(c, s); c.Close() }()
	}
}

func (p *cutProxy) cut() {
	p.down.Store(true)
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

// TestDatabaseGoneAnswers503AndRecovers: a node on PostgreSQL whose database cannot be reached
// answers 503 with Retry-After and code UNAVAILABLE (never a success it did not commit), and
// serves again by itself once the database is back.
func TestDatabaseGoneAnswers503AndRecovers(t *testing.T) {
	t.Parallel()
	raw := pgtest.URL(t)
	u, _ := url.Parse(raw)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &cutProxy{ln: ln, target: u.Host}
	go px.serve()
	t.Cleanup(func() { ln.Close(); px.cut() })
	u.Host = ln.Addr().String()
	st, err := stream.Open(u.String(), stream.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts := httptest.NewServer(server.New(st, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer ts.Close()

	do := func(method, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+"/v1/stream/gone", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := do(http.MethodPut, ""); r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", r.StatusCode)
	}
	px.cut()
	r := do(http.MethodPost, `{"n":1}`)
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		r.Header.Get("Foldstream-Error-Code") != "UNAVAILABLE" {
		t.Fatalf("append with the database gone: %d Retry-After %q code %q, want 503 with Retry-After, UNAVAILABLE",
			r.StatusCode, r.Header.Get("Retry-After"), r.Header.Get("Foldstream-Error-Code"))
	}
	if r := do(http.MethodGet, ""); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("read with the database gone: %d, want 503", r.StatusCode)
	}
	px.down.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if r := do(http.MethodPost, `{"n":2}`); r.StatusCode/100 == 2 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the node did not recover after the database came back: %d", r.StatusCode)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the pool to reconnect by itself
	}
	// Only the acknowledged message is in the stream: the refused one was never committed.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/stream/gone?offset=-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `[{"n":2}]` {
		t.Fatalf("stream after the outage: %s, want [{\"n\":2}]", b)
	}
}
