// Package cluster runs processors on several foldstream nodes sharing one PostgreSQL database, each
// (stream, processor) on exactly one node at a time (see docs/postgres.md#processors-and-leases).
//
// Every node registers the same processors. For each one, a lease loop competes for a lease row
// in the database: the node that holds it runs the engine in its [host.Host] — waking the stream,
// catching up from the checkpoint and reviving claims — and renews the lease every third of its
// time. A node that stops renewing (killed, paused, cut off) loses the lease once it runs out;
// another node takes it over with the next generation and starts its own engine from the
// checkpoint. The old engine is fenced twice:
//
//   - its checkpoint writes carry the lease generation and are checked inside their transaction,
//     so once the lease changed hands they commit nothing (LEASE_LOST);
//   - its appends (emitted events, live-state deltas) are refused with LEASE_LOST once the lease's
//     time ran out by this node's clock, and the lease loop stops the engine as soon as it
//     notices.
//
// Processor reads (snapshot, live snapshot, waitUntilProcessed) work on every node: the owner
// answers from its engine; any other node asks the owner over HTTP, at the address the owner
// wrote into its lease row (Config.Addr). The answer therefore has the owner's read-your-writes.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// DefaultLeaseTTL is how long a lease lasts without renewal: the bound on how long a dead node's
// processors wait before another node takes them over.
const DefaultLeaseTTL = 5 * time.Second

// DefaultProcessorPrefix is where nodes serve processor routes (the server's default).
const DefaultProcessorPrefix = "/v1/processor/"

// Config configures a Cluster.
type Config struct {
	// Driver is the PostgreSQL driver of the node's store. Required.
	Driver *pgdriver.Driver
	// Addr is this node's base URL as other nodes reach it, e.g. http://10.0.0.5:4437. Required
	// for reads forwarded to the owner.
	Addr string
	// LeaseTTL is a lease's lifetime without renewal. Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// ProcessorPrefix is the processor routes' prefix on every node. Defaults to
	// DefaultProcessorPrefix.
	ProcessorPrefix string
	// Client forwards reads to owners. Defaults to a client with a 65 s timeout.
	Client *http.Client
	// Logger receives the cluster's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Cluster runs leased processors on a host. It implements server.Processors.
type Cluster struct {
	h   *host.Host
	drv *pgdriver.Driver
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	procs    map[procKey]*leased
	shutdown bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

type procKey struct{ path, slug string }

// leased is one registered processor and its lease loop's state.
type leased struct {
	path, slug string
	build      func(st foldstream.Stream, cps foldstream.CheckpointStorage) (foldstream.Runner, error)

	mu     sync.Mutex
	lease  pgdriver.Lease
	held   bool
	runner foldstream.Runner
	ready  bool // the host runs runner: its catch-up finished
	failed bool // starting under the current lease failed: give the lease up
	// cancelStart cancels the start (wake, subscribe, catch-up) running under the current lease;
	// startDone is closed when it returned.
	cancelStart context.CancelFunc
	startDone   chan struct{}
	// acquired counts takeovers by this node (tests and metrics).
	acquired int
}

// New returns a cluster running leased processors on h, whose store must be opened over cfg.Driver.
func New(h *host.Host, cfg Config) (*Cluster, error) {
	if h == nil || cfg.Driver == nil {
		return nil, errors.New("cluster: a host and a PostgreSQL driver are required")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.ProcessorPrefix == "" {
		cfg.ProcessorPrefix = DefaultProcessorPrefix
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 65 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Addr = strings.TrimRight(cfg.Addr, "/")
	return &Cluster{h: h, drv: cfg.Driver, cfg: cfg, log: cfg.Logger, procs: make(map[procKey]*leased),
		stop: make(chan struct{})}, nil
}

// leaseKey names the lease of processor slug on the stream at path, joined by the unit separator
// (PostgreSQL text cannot hold the NUL byte).
func leaseKey(path, slug string) string { return "processor\x1f" + path + "\x1f" + slug }

// Register registers processor p on the stream at path on this node. The node runs it whenever it
// holds its lease; every node of the cluster registers the same processors.
func Register[S any](c *Cluster, path string, p foldstream.Processor[S]) error {
	slug := p.Contract().Slug()
	return c.add(path, slug, func(st foldstream.Stream, cps foldstream.CheckpointStorage) (foldstream.Runner, error) {
		e, err := foldstream.NewEngine(p, foldstream.EngineConfig{
			Stream:      st,
			Checkpoints: cps,
			FedByPushes: true,
			Clock:       c.h.Store().Clock(),
			Logger:      c.log,
		})
		if err != nil {
			return nil, err
		}
		return e, nil
	})
}

func (c *Cluster) add(path, slug string, build func(foldstream.Stream, foldstream.CheckpointStorage) (foldstream.Runner, error)) error {
	key := procKey{path, slug}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shutdown {
		return host.ErrShutdown
	}
	if _, ok := c.procs[key]; ok {
		return fmt.Errorf("cluster: processor %q is already registered on %q", slug, path)
	}
	lp := &leased{path: path, slug: slug, build: build}
	c.procs[key] = lp
	c.wg.Add(1)
	go c.loop(lp)
	return nil
}

// loop competes for lp's lease until shutdown: acquire, start, renew; stop on loss.
func (c *Cluster) loop(lp *leased) {
	defer c.wg.Done()
	ttl := c.cfg.LeaseTTL
	for {
		wait := ttl / 3
		lp.mu.Lock()
		held, lease := lp.held, lp.lease
		lp.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		if !held {
			l, ok, err := c.drv.AcquireLease(ctx, leaseKey(lp.path, lp.slug), c.cfg.Addr, ttl)
			switch {
			case err != nil:
				c.log.Warn("cluster: acquire lease", "path", lp.path, "slug", lp.slug, "err", err)
			case ok:
				c.startAsync(lp, l)
			}
		} else if lp.startFailed() {
			// Starting failed (the catch-up could not read, say): give the lease up so that
			// this or another node tries again from the checkpoint.
			c.stopRunner(lp)
			_ = c.drv.ReleaseLease(ctx, lease)
		} else {
			l, ok, err := c.drv.RenewLease(ctx, lease, ttl)
			switch {
			case err == nil && ok:
				lp.mu.Lock()
				lp.lease = l
				lp.mu.Unlock()
			case err == nil && !ok:
				c.log.Warn("cluster: lease taken over by another node; stopping the processor", "path", lp.path, "slug", lp.slug)
				c.stopRunner(lp)
				wait = 0
			default:
				c.log.Warn("cluster: renew lease", "path", lp.path, "slug", lp.slug, "err", err)
				if time.Now().After(lease.Expires) {
					c.log.Warn("cluster: lease ran out; stopping the processor", "path", lp.path, "slug", lp.slug)
					c.stopRunner(lp)
				} else {
					wait = min(wait, time.Until(lease.Expires)/2)
				}
			}
		}
		cancel()
		select {
		case <-c.stop:
			c.release(lp)
			return
		case <-time.After(wait):
		}
	}
}

// startAsync records the new lease and starts the processor under it in the background: a
// catch-up may take longer than the lease, which the loop keeps renewing meanwhile.
func (c *Cluster) startAsync(lp *leased, l pgdriver.Lease) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lp.mu.Lock()
	lp.lease, lp.held, lp.ready, lp.failed = l, true, false, false
	lp.acquired++
	lp.cancelStart, lp.startDone = cancel, done
	lp.mu.Unlock()
	go func() {
		defer close(done)
		err := c.start(ctx, lp, l)
		lp.mu.Lock()
		defer lp.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("cluster: start processor after taking its lease", "path", lp.path, "slug", lp.slug, "err", err)
			}
			lp.failed = true
			return
		}
		lp.ready = true
	}()
}

func (lp *leased) startFailed() bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.failed
}

// start runs a new engine for lp under lease l: the host wakes the stream, subscribes the engine,
// catches it up from the checkpoint and revives its claim.
func (c *Cluster) start(ctx context.Context, lp *leased, l pgdriver.Lease) error {
	st := &fencedStream{inner: c.h.Store().Stream(lp.path).ForProcessor(lp.slug), lp: lp}
	cps := c.drv.Checkpoints(lp.path, l.Fence())
	r, err := lp.build(st, cps)
	if err != nil {
		return err
	}
	lp.mu.Lock()
	lp.runner = r
	lp.mu.Unlock()
	// A lease longer than the catch-up is not needed: renewals continue after Add returns.
	if err := c.h.Add(ctx, lp.path, r); err != nil {
		lp.mu.Lock()
		lp.runner = nil
		lp.mu.Unlock()
		return err
	}
	c.log.Info("cluster: took processor lease", "path", lp.path, "slug", lp.slug, "generation", l.Generation)
	return nil
}

// stopRunner stops lp's engine on this node (the lease is lost or given up).
func (c *Cluster) stopRunner(lp *leased) {
	lp.mu.Lock()
	cancel, done := lp.cancelStart, lp.startDone
	lp.held, lp.ready, lp.cancelStart, lp.startDone = false, false, nil, nil
	lp.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	lp.mu.Lock()
	r := lp.runner
	lp.runner = nil
	lp.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	if err := c.h.Remove(ctx, lp.path, lp.slug); err != nil && !errors.Is(err, host.ErrNotRegistered) {
		c.log.Warn("cluster: stop processor", "path", lp.path, "slug", lp.slug, "err", err)
	}
}

// release stops lp's engine and gives its lease up, so another node takes over at once.
func (c *Cluster) release(lp *leased) {
	lp.mu.Lock()
	held, l, r := lp.held, lp.lease, lp.runner
	lp.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	c.stopRunner(lp)
	if r != nil {
		_ = r.Drain(ctx)
	}
	if err := c.drv.ReleaseLease(ctx, l); err != nil {
		c.log.Warn("cluster: release lease", "path", lp.path, "slug", lp.slug, "err", err)
	}
}

// Shutdown stops every lease loop, stops the engines this node runs and releases their leases so
// other nodes take them over without waiting. It does not shut the host down.
func (c *Cluster) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.shutdown {
		c.mu.Unlock()
		return nil
	}
	c.shutdown = true
	close(c.stop)
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Holds reports whether this node currently runs processor slug on the stream at path, and the
// number of times it took the lease.
func (c *Cluster) Holds(path, slug string) (held bool, acquired int) {
	c.mu.Lock()
	lp, ok := c.procs[procKey{path, slug}]
	c.mu.Unlock()
	if !ok {
		return false, 0
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.held && lp.ready, lp.acquired
}

// fencedStream is the engine's stream under a lease: appends are refused once the lease's time
// ran out by this node's clock (a paused node wakes up past it).
type fencedStream struct {
	inner *stream.EventStream
	lp    *leased
}

func (f *fencedStream) check() error {
	f.lp.mu.Lock()
	l, held := f.lp.lease, f.lp.held
	f.lp.mu.Unlock()
	if !held || time.Now().After(l.Expires) {
		e := foldstream.NewError(foldstream.CodeLeaseLost, map[string]any{"lease": l.Key, "generation": l.Generation},
			"processor %q on %q: this node no longer holds its lease; nothing was appended", f.lp.slug, f.lp.path)
		e.Retryable = false
		return e
	}
	return nil
}

func (f *fencedStream) Append(ctx context.Context, events ...foldstream.EventInput) ([]foldstream.Event, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.inner.Append(ctx, events...)
}

func (f *fencedStream) Read(ctx context.Context, after int64, limit int) (foldstream.ReadPage, error) {
	return f.inner.Read(ctx, after, limit)
}

func (f *fencedStream) Claim(ctx context.Context, at time.Time) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.inner.Claim(ctx, at)
}

// Processor reads: the owner answers; other nodes ask it.

// local returns true when this node runs the processor now.
func (c *Cluster) local(path, slug string) bool {
	held, _ := c.Holds(path, slug)
	return held
}

// Snapshot returns the processor's cursor and state, from the node that runs it.
func (c *Cluster) Snapshot(ctx context.Context, path, slug string) (host.Snapshot, error) {
	if c.local(path, slug) {
		return c.h.Snapshot(ctx, path, slug)
	}
	var snap host.Snapshot
	err := c.forward(ctx, path, slug, url.Values{}, &snap)
	return snap, err
}

// LiveSnapshot returns the processor's live state, from the node that runs it.
func (c *Cluster) LiveSnapshot(ctx context.Context, path, slug string) (foldstream.LiveSnapshot, error) {
	if c.local(path, slug) {
		return c.h.LiveSnapshot(ctx, path, slug)
	}
	var seed struct {
		Rev   int64           `json:"rev"`
		State json.RawMessage `json:"state"`
	}
	err := c.forward(ctx, path, slug, url.Values{"view": {"live"}}, &seed)
	return foldstream.LiveSnapshot{Rev: seed.Rev, State: seed.State}, err
}

// WaitUntilProcessed waits, on the node that runs the processor, until it reduced through offset.
func (c *Cluster) WaitUntilProcessed(ctx context.Context, path, slug string, offset int64, timeout time.Duration) error {
	if c.local(path, slug) {
		return c.h.WaitUntilProcessed(ctx, path, slug, offset, timeout)
	}
	if timeout <= 0 {
		timeout = foldstream.DefaultWaitTimeout
	}
	q := url.Values{"waitUntilProcessed": {strconv.FormatInt(offset, 10)}, "timeout": {timeout.String()}}
	var snap host.Snapshot
	return c.forward(ctx, path, slug, q, &snap)
}

// forward asks the lease holder for the processor route and decodes its JSON answer into out.
func (c *Cluster) forward(ctx context.Context, path, slug string, q url.Values, out any) error {
	c.mu.Lock()
	_, registered := c.procs[procKey{path, slug}]
	c.mu.Unlock()
	if !registered {
		return fmt.Errorf("cluster: processor %q on %q: %w", slug, path, host.ErrNotRegistered)
	}
	_, addr, live, err := c.drv.LeaseHolder(ctx, leaseKey(path, slug))
	if err != nil {
		return err
	}
	if live && addr == c.cfg.Addr {
		return foldstream.NewError(foldstream.CodeCatchingUp, map[string]any{"path": path, "slug": slug},
			"processor %q on %q is catching up on this node after taking it over; retry shortly", slug, path)
	}
	if !live || addr == "" {
		return foldstream.NewError(foldstream.CodeUnavailable, map[string]any{"path": path, "slug": slug},
			"processor %q on %q is changing nodes; retry shortly", slug, path)
	}
	u := addr + (&url.URL{Path: c.cfg.ProcessorPrefix + slug + path}).EscapedPath()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("cluster: forward to the owner: %w", err)
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return foldstream.NewError(foldstream.CodeUnavailable, map[string]any{"owner": addr},
			"processor %q on %q: its node %s did not answer: %v", slug, path, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return foldstream.NewError(foldstream.CodeUnavailable, nil, "processor %q on %q: read the owner's answer: %v", slug, path, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("cluster: decode the owner's answer: %w", err)
		}
		return nil
	}
	code := foldstream.Code(resp.Header.Get("Foldstream-Error-Code"))
	msg := strings.TrimSpace(string(body))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("cluster: processor %q on %q: %w", slug, path, host.ErrNotRegistered)
	case code != "":
		return foldstream.NewError(code, nil, "%s", msg)
	case resp.StatusCode == http.StatusGatewayTimeout:
		return foldstream.NewError(foldstream.CodeProcessTimeout, nil, "%s", msg)
	default:
		return foldstream.NewError(foldstream.CodeUnavailable, map[string]any{"status": resp.StatusCode},
			"processor %q on %q: its node answered %d: %s", slug, path, resp.StatusCode, msg)
	}
}
