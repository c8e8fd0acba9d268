// Package host is foldstream's default host: it runs processor engines on the streams of a
// [stream.Store]. It is also the worked example of what any host must do, using only public API:
//
//   - build each engine over the store's event view ([stream.Store.Stream]) and a checkpoint table in
//     the same SQLite file ([stream.Store.Checkpoints]), with FedByPushes set;
//   - wake the stream once per incarnation ([stream.Store.Wake]), subscribe the engine to the
//     stream filtered by its consumes ([stream.Store.Subscribe]) and catch it up from its checkpoint;
//   - serve snapshot, live snapshot and wait-until-processed with read-your-writes: a read first
//     waits until every push the subscription already owes the engine was delivered (spec §8.2);
//   - run the alarm loop that revives processors whose claims fell due; a failed revive is
//     re-claimed with backoff 20 s · 2^failures up to 30 min (spec §10.4);
//   - shut down gracefully: stop intake, drain the push chains, and wait for background work until
//     the context ends.
//
// A host does not own the store: close it after [Host.Shutdown].
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/stream"
)

// Config configures a Host. The zero value is valid.
type Config struct {
	// Logger receives the host's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Reporter receives contained processor failures of engines built by [Register]. Defaults to
	// the engine's default (a reporter logging to Logger).
	Reporter foldstream.Reporter
	// MaxPendingEvents bounds the events queued for one processor's push chain; see
	// [stream.SubscribeOptions]. Defaults to stream.DefaultMaxPendingEvents.
	MaxPendingEvents int
	// ManualAlarms leaves the alarm loop stopped until [Host.StartAlarms] is called. By default
	// New starts it.
	ManualAlarms bool
}

// Host runs processors on a store's streams. It is safe for concurrent use.
type Host struct {
	store *stream.Store
	cfg   Config
	log   *slog.Logger

	mu       sync.Mutex
	procs    map[procKey]*hosted
	shutdown bool
	alarms   bool
}

type procKey struct{ path, slug string }

type hosted struct {
	path   string
	runner foldstream.Runner
	sub    *stream.Subscription
}

// ErrNotRegistered is returned for a (path, slug) with no registered processor.
var ErrNotRegistered = &foldstream.Error{Code: foldstream.CodeNotRegistered, Message: "no processor is registered with this slug on this stream"}

// ErrShutdown is returned by a host that is shutting down.
var ErrShutdown = &foldstream.Error{Code: foldstream.CodeClosed, Message: "host is shut down"}

// New returns a host over store and, unless cfg.ManualAlarms, starts its alarm loop (one per
// store).
func New(store *stream.Store, cfg Config) (*Host, error) {
	if store == nil {
		return nil, errors.New("host: store is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Host{store: store, cfg: cfg, log: cfg.Logger, procs: make(map[procKey]*hosted)}
	if !cfg.ManualAlarms {
		if err := h.StartAlarms(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Store returns the host's store.
func (h *Host) Store() *stream.Store { return h.store }

// StartAlarms starts the alarm loop that revives processors whose claims fell due. New calls it
// unless Config.ManualAlarms.
func (h *Host) StartAlarms() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return ErrShutdown
	}
	if h.alarms {
		return nil
	}
	if err := h.store.StartAlarms(h.revive); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	h.alarms = true
	return nil
}

// Register builds an engine for processor p over the stream at path — the store's event view, a
// checkpoint table in the same file scoped by path, FedByPushes — and adds it to the host (see
// [Host.Add]). It returns the engine, which the caller may also use directly.
func Register[S any](ctx context.Context, h *Host, path string, p foldstream.Processor[S]) (*foldstream.Engine[S], error) {
	cps, err := h.store.Checkpoints(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("host: register on %q: %w", path, err)
	}
	eng, err := foldstream.NewEngine(p, foldstream.EngineConfig{
		Stream:      h.store.Stream(path).ForProcessor(p.Contract().Slug()),
		Checkpoints: cps,
		FedByPushes: true,
		Clock:       h.store.Clock(),
		Reporter:    h.cfg.Reporter,
		Logger:      h.log,
	})
	if err != nil {
		return nil, fmt.Errorf("host: register on %q: %w", path, err)
	}
	if err := h.Add(ctx, path, eng); err != nil {
		return nil, err
	}
	return eng, nil
}

// Add hosts a runner the caller built on the stream at path. The runner must run against the
// store's event view of path with FedByPushes (Register builds such an engine). Add wakes the stream
// (its wake record for this incarnation), subscribes the runner to the stream's commits filtered by
// its consumes, catches it up from its checkpoint, and brings forward a claim a previous
// incarnation left, so the alarm loop revives it now. A failed catch-up is returned and the runner
// is not hosted.
func (h *Host) Add(ctx context.Context, path string, r foldstream.Runner) error {
	key := procKey{path, r.Slug()}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return ErrShutdown
	}
	if _, ok := h.procs[key]; ok {
		h.mu.Unlock()
		return fmt.Errorf("host: processor %q is already registered on %q", key.slug, path)
	}
	hp := &hosted{path: path, runner: r}
	h.procs[key] = hp // reserve the key; removed again on failure
	h.mu.Unlock()

	err := h.start(ctx, hp)
	if err != nil {
		h.mu.Lock()
		delete(h.procs, key)
		h.mu.Unlock()
		h.mu.Lock()
		sub := hp.sub
		h.mu.Unlock()
		if sub != nil {
			sub.Close()
		}
		return fmt.Errorf("host: register %q on %q: %w", key.slug, path, err)
	}
	return nil
}

func (h *Host) start(ctx context.Context, hp *hosted) error {
	if _, err := h.store.Wake(ctx, hp.path, stream.WakeRequest); err != nil {
		return err
	}
	r := hp.runner
	sub, err := h.store.Subscribe(hp.path, r.ProcessEventBatch, stream.SubscribeOptions{
		Consumes:         r.Consumes(),
		MaxPendingEvents: h.cfg.MaxPendingEvents,
		Name:             r.Slug(),
	})
	if err != nil {
		return err
	}
	// Published under the lock, and only while the host runs: Shutdown drains exactly the
	// subscriptions it finds set, so one set after it would stay live (pushing to a runner the
	// host no longer owns) until the store closes.
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		sub.Close()
		return ErrShutdown
	}
	hp.sub = sub
	h.mu.Unlock()
	if err := r.CatchUpFromLog(ctx); err != nil {
		return err
	}
	// A claim left by a previous incarnation means work was in flight when it died: revive now.
	claims, err := h.store.Claims(ctx)
	if err != nil {
		return err
	}
	for _, c := range claims {
		if c.Path == hp.path && c.Slug == r.Slug() && c.At.After(h.store.Clock().Now()) && c.Failures > 0 {
			if err := h.store.Claim(ctx, c.Path, c.Slug, h.store.Clock().Now()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove stops hosting the processor: its subscription is drained (until ctx ends) and closed.
// Its checkpoint and claims stay.
func (h *Host) Remove(ctx context.Context, path, slug string) error {
	h.mu.Lock()
	hp, ok := h.procs[procKey{path, slug}]
	if !ok || hp.sub == nil {
		// Absent, or its Add is still starting (the key is only reserved): nothing to remove yet.
		h.mu.Unlock()
		return ErrNotRegistered
	}
	delete(h.procs, procKey{path, slug})
	sub := hp.sub
	h.mu.Unlock()
	return sub.Drain(ctx)
}

// Runner returns the hosted runner of processor slug on the stream at path.
func (h *Host) Runner(path, slug string) (foldstream.Runner, bool) {
	hp, err := h.lookup(path, slug)
	if err != nil {
		return nil, false
	}
	return hp.runner, true
}

func (h *Host) lookup(path, slug string) (*hosted, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		// Its subscriptions are closed: an engine would answer from a head nobody pushes any more.
		return nil, ErrShutdown
	}
	hp, ok := h.procs[procKey{path, slug}]
	if !ok || hp.sub == nil {
		return nil, fmt.Errorf("host: processor %q on %q: %w", slug, path, ErrNotRegistered)
	}
	return hp, nil
}

// owed holds a read until every push the subscription already owes the runner arrived (spec §8.2,
// upstream deliveriesQueuedFor): an append that returned has its pushes queued, so a read after it
// sees it.
func (h *Host) owed(ctx context.Context, path, slug string) (*hosted, error) {
	hp, err := h.lookup(path, slug)
	if err != nil {
		return nil, err
	}
	if err := hp.sub.WaitDelivered(ctx); err != nil && !errors.Is(err, stream.ErrSubscriptionClosed) {
		return nil, err
	}
	return hp, nil
}

// Snapshot is a processor's cursor and reduced state: the root package's one snapshot shape.
type Snapshot = foldstream.JSONSnapshot

// Snapshot returns processor slug's cursor and state on the stream at path, with read-your-writes:
// it reflects every append that returned before the call. Do not call it from inside the same
// processor's batch.
func (h *Host) Snapshot(ctx context.Context, path, slug string) (Snapshot, error) {
	hp, err := h.owed(ctx, path, slug)
	if err != nil {
		return Snapshot{}, err
	}
	off, state, err := hp.runner.SnapshotJSON(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Offset: off, State: state}, nil
}

// LiveSnapshot returns processor slug's live state {rev, state} on the stream at path, with
// read-your-writes like Snapshot. Clients seed from it and apply live-state deltas whose from
// equals the held rev (spec §12.4).
func (h *Host) LiveSnapshot(ctx context.Context, path, slug string) (foldstream.LiveSnapshot, error) {
	hp, err := h.owed(ctx, path, slug)
	if err != nil {
		return foldstream.LiveSnapshot{}, err
	}
	return hp.runner.LiveSnapshot(ctx)
}

// WaitUntilProcessed waits until processor slug on the stream at path reduced through offset, or
// fails after timeout (0 means foldstream.DefaultWaitTimeout) or when ctx ends.
func (h *Host) WaitUntilProcessed(ctx context.Context, path, slug string, offset int64, timeout time.Duration) error {
	hp, err := h.lookup(path, slug)
	if err != nil {
		return err
	}
	return hp.runner.WaitUntilProcessed(ctx, offset, timeout)
}

// revive is the alarm handler: it revives the processor a due claim names. An unknown processor
// (not registered yet, or no longer) fails, so the claim is kept with backoff; Add brings it
// forward when the processor registers.
func (h *Host) revive(ctx context.Context, c stream.DueClaim) error {
	hp, err := h.lookup(c.Path, c.Slug)
	if err != nil {
		return err
	}
	if err := hp.runner.Revive(ctx); err != nil {
		h.log.Warn("host: revive failed", "path", c.Path, "slug", c.Slug, "failures", c.Failures, "err", err)
		return err
	}
	return nil
}

// Shutdown stops the host: no processor is added any more, the alarm loop stops (running revives
// get their context cancelled and are waited for), each processor's pending pushes are delivered
// and its subscription closed, and each engine is drained — its chain idle and its background
// work settled — or ctx ends. It returns the first error. Reads through the host fail with
// ErrShutdown from then on; the store stays open.
func (h *Host) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return nil
	}
	h.shutdown = true
	alarms := h.alarms
	procs := make([]*hosted, 0, len(h.procs))
	for _, hp := range h.procs {
		if hp.sub != nil {
			procs = append(procs, hp)
		}
	}
	h.mu.Unlock()
	if alarms {
		h.store.StopAlarms()
	}
	var errs []error
	for _, hp := range procs {
		if err := hp.sub.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("host: drain pushes to %q on %q: %w", hp.runner.Slug(), hp.path, err))
		}
	}
	for _, hp := range procs {
		if err := hp.runner.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("host: drain %q on %q: %w", hp.runner.Slug(), hp.path, err))
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
