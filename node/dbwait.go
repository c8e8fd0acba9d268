package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream"
)

// openWaiting opens the store, waiting up to wait for a database that is unavailable (down,
// restarting, or "the database system is starting up"): a node and its database started together
// must not crash-loop. Meanwhile every request on ln is answered 503 UNAVAILABLE with
// Retry-After, so load balancers and clients back off instead of seeing a refused connection.
// It returns the listener to serve the store on: ln's connections, handed over with none lost.
// Errors other than UNAVAILABLE, and wait running out, are returned at once.
func openWaiting(ctx context.Context, open func() (*stream.Store, error), ln net.Listener, wait time.Duration, log *slog.Logger) (*stream.Store, net.Listener, error) {
	st, err := open()
	if err == nil || wait <= 0 || foldtype.CodeOf(err) != foldtype.CodeUnavailable {
		return st, ln, err
	}
	hl := newHandoff(ln)
	waiting := hl.phase(false)
	srv := &http.Server{
		Handler:           http.HandlerFunc(answerWaiting),
		ReadHeaderTimeout: server.DefaultHeaderReadTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Logged before the first 503 can leave, so the log says why a node answers 503.
	log.Warn("the database is unavailable: waiting for it, answering 503 meanwhile", "err", err, "addr", ln.Addr().String(), "wait", wait)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(waiting)
	}()
	stopWaiting := func() {
		// Close the waiting phase (not ln) and let requests in progress finish: they are short.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-served
	}

	start := time.Now()
	deadline := start.Add(wait)
	backoff := 250 * time.Millisecond
	for attempt := 2; ; attempt++ {
		pause := min(backoff, time.Until(deadline))
		if pause <= 0 {
			stopWaiting()
			ln.Close()
			return nil, nil, fmt.Errorf("%w after %s: %w", ErrGaveUpWaiting, wait.Round(time.Millisecond), err)
		}
		select {
		case <-ctx.Done():
			stopWaiting()
			ln.Close()
			return nil, nil, ctx.Err()
		case <-time.After(pause):
		}
		backoff = min(2*backoff, 5*time.Second)
		st, err = open()
		if err == nil {
			log.Info("the database is back: serving", "waited", time.Since(start).Round(time.Millisecond), "attempts", attempt)
			stopWaiting()
			return st, hl.phase(true), nil
		}
		if foldtype.CodeOf(err) != foldtype.CodeUnavailable {
			stopWaiting()
			ln.Close()
			return nil, nil, err
		}
		log.Warn("still waiting for the database", "err", err, "attempt", attempt, "waited", time.Since(start).Round(time.Second))
	}
}

// answerWaiting answers every request while the node waits for its database.
func answerWaiting(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set(server.HeaderRequestID, server.RequestID(r))
	if r.URL.Path == server.HealthPath {
		// The process is up (only not ready: /readyz answers 503 like every other route).
		h.Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
		return
	}
	h.Set("Retry-After", "1")
	h.Set(server.HeaderErrorCode, string(foldtype.CodeUnavailable))
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintln(w, "the database is unavailable: this node is waiting for it; retry later")
}

// handoff accepts the connections of one listener and hands them to one server after another
// (the waiting answerer, then the real server), so none is refused or lost between the two.
type handoff struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{} // closed when ln fails
	err   error         // ln's error, set before done closes
	stop  chan struct{} // closed with the final phase
	once  sync.Once
}

func newHandoff(ln net.Listener) *handoff {
	h := &handoff{ln: ln, conns: make(chan net.Conn), done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				h.err = err
				close(h.done)
				return
			}
			select {
			case h.conns <- c:
			case <-h.stop:
				c.Close()
				return
			}
		}
	}()
	return h
}

// phase returns a listener taking the next connections until it is closed. Closing the final
// phase closes the underlying listener.
func (h *handoff) phase(final bool) net.Listener {
	return &phaseListener{h: h, final: final, closed: make(chan struct{})}
}

type phaseListener struct {
	h      *handoff
	final  bool
	once   sync.Once
	closed chan struct{}
}

func (p *phaseListener) Accept() (net.Conn, error) {
	select {
	case <-p.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-p.h.conns:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	case <-p.h.done:
		return nil, p.h.err
	}
}

func (p *phaseListener) Close() error {
	var err error
	p.once.Do(func() {
		close(p.closed)
		if p.final {
			p.h.once.Do(func() { close(p.h.stop) })
			err = p.h.ln.Close()
			if errors.Is(err, net.ErrClosed) {
				err = nil
			}
		}
	})
	return err
}

func (p *phaseListener) Addr() net.Addr { return p.h.ln.Addr() }
