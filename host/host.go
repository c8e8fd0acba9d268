// Package host is foldstream's default host: it runs processor engines on the streams of a
// [stream.Store]. It is also the worked example of what any host must do, using only public API
// (docs/store.md#the-default-host states the rules in full):
//
//   - build each engine over the store's event view ([stream.Events.Stream]) and the checkpoints kept
//     in the store's own database ([stream.Events.Checkpoints]), with FedByPushes set;
//   - wake the stream at most once per host start, only when a processor starts work there and
//     never a closed stream ([stream.Events.WakeExisting]; docs/store.md#records-nobody-appended),
//     subscribe the engine to the stream filtered by its consumes ([stream.Events.Subscribe]) and
//     catch it up from its checkpoint
//     in the background: registering never waits for a catch-up;
//   - serve snapshot, live snapshot and wait-until-processed with read-your-writes (a read first
//     waits until every push the subscription already owes the engine was delivered) and with a
//     bounded wait: a processor still catching up answers CATCHING_UP;
//   - run one engine per stream for a pattern registration ([RegisterPattern]), opening it on the
//     stream's first commit, read or due claim and closing it when idle or when the cap on open
//     engines needs room; a closed engine reopens from its checkpoint;
//   - run the alarm loop that revives processors whose claims fell due, and revive at once the
//     claims a previous incarnation left;
//   - park a processor whose own emitted event conflicts (PROCESSOR_PARKED), without touching the
//     others;
//   - shut down gracefully: stop intake, drain the push chains, and close every engine.
//
// A host does not own the store: close it after [Host.Shutdown].
package host

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Defaults of the Config fields that bound memory and waits.
const (
	// DefaultIdleTimeout is how long an engine of a pattern registration stays open without a push,
	// read or revive before the host closes it.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultMaxOpenEngines caps the open engines of pattern registrations.
	DefaultMaxOpenEngines = 1000
	// DefaultMaxWait bounds how long a snapshot waits for a processor that is catching up.
	DefaultMaxWait = 10 * time.Second
)

// Config configures a Host. The zero value is valid.
type Config struct {
	// Logger receives the host's logs; warnings that repeat are folded into one line per
	// WarnInterval. Defaults to slog.Default().
	Logger *slog.Logger
	// Reporter receives contained processor failures of engines built by [Register] and
	// [RegisterPattern]. Defaults to the engine's default (a reporter logging to Logger).
	Reporter foldstream.Reporter
	// TracerProvider, when set, traces every ProcessEvent of the engines the host builds
	// ([foldstream.EngineConfig.TracerProvider]). Defaults to nil: no spans.
	TracerProvider trace.TracerProvider
	// MaxPendingEvents bounds the events queued for one processor's push chain; see
	// [stream.SubscribeOptions]. Defaults to stream.DefaultMaxPendingEvents.
	MaxPendingEvents int
	// ManualAlarms leaves the alarm loop stopped until [Host.StartAlarms] is called. By default
	// New starts it.
	ManualAlarms bool
	// IdleTimeout closes an engine of a pattern registration that saw no push, read or revive for
	// this long (measured on the store's clock, checked every half IdleTimeout); it reopens from
	// its checkpoint on the next one. Engines of exact-path registrations stay open. Defaults to
	// DefaultIdleTimeout (5 minutes); a negative value never closes idle engines.
	IdleTimeout time.Duration
	// MaxOpenEngines caps the open engines of pattern registrations: opening one more closes the
	// least recently used first. An engine that is in use (catching up, serving a read, reviving)
	// is not closed, so the cap can be passed briefly while every open engine is busy. Defaults to
	// DefaultMaxOpenEngines (1000).
	MaxOpenEngines int
	// MaxWait bounds how long Snapshot and LiveSnapshot wait for a processor that is still
	// catching up, and caps WaitUntilProcessed's timeout; past it they fail with code CATCHING_UP
	// (see [ErrCatchingUp]). Defaults to DefaultMaxWait (10 s).
	MaxWait time.Duration
	// WarnInterval is the interval over which repeats of one warning are folded into a count.
	// Defaults to DefaultWarnInterval (10 s).
	WarnInterval time.Duration
	// CodeID names the code this host runs. A processor whose background work died with its host
	// foldstream.MaxDeaths times on one CodeID is not revived again until it receives an event
	// (docs/store.md#work-that-keeps-dying); a new CodeID — a new build — starts the count afresh.
	// Defaults to BuildCodeID().
	CodeID string
	// LoopLimit is the deepest cause chain a processor's emit may extend
	// (docs/engine.md#cause-chains). Defaults to foldstream.DefaultLoopLimit (32).
	LoopLimit int
	// WriteRetry is how long a processor's engine sends again an emit or a checkpoint the store
	// refused because its database could not be reached, before the unit fails and the processor
	// is failing (docs/engine.md#writes-through-a-database-blip). Defaults to
	// foldstream.DefaultWriteRetry (30 s); negative: never sent again.
	WriteRetry time.Duration

	// Addr is this node's base URL as other nodes of a cluster reach it (http://10.0.0.5:4437),
	// stored with its leases. A node that gets a processor read for a stream another node runs
	// asks that node at its Addr; when the owner has none, it answers from the checkpoint in the
	// database once that covers the stream's head as of the read (docs/postgres.md#processors-and-leases).
	// Empty by default: nothing to configure for a safe cluster.
	Addr string
	// ProcessorPrefix is where every node serves the processor routes, for reads asked of an
	// owner at its Addr. Defaults to DefaultProcessorPrefix.
	ProcessorPrefix string
	// Client asks owners at their Addr. Defaults to a client with a 65 s timeout.
	Client *http.Client
	// LeaseTTL is how long a processor's lease lasts without renewal: a killed node's processors
	// resume on another node within about twice this. Defaults to DefaultLeaseTTL (5 s).
	LeaseTTL time.Duration
	// NodeID names this node in its leases. Defaults to a random id (host name, pid and random
	// bytes); two live nodes must never share one.
	NodeID string
}

// BuildCodeID identifies the running binary's build: its main module's version and, when the
// binary was built from a VCS checkout, the revision and whether it had local changes. It is ""
// when the binary carries no build information.
func BuildCodeID() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	id := bi.Main.Path + "@" + bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
			id += " " + s.Key + "=" + s.Value
		}
	}
	return id
}

// Host runs processors on a store's streams (docs/store.md#the-default-host). All its methods are
// safe for concurrent use.
//
// Create it with [New] over an open store; add processors with [Register] (one stream path, the
// engine returned) or [RegisterPattern] (every stream matching a path pattern, one engine per
// stream, opened on demand); read them with [Host.Snapshot], [Host.LiveSnapshot] and
// [Host.WaitUntilProcessed], or serve those reads over HTTP by giving the host to package server
// (server.Config.Processors); stop it with [Host.Shutdown], then close the store, which the host
// does not own.
//
// What a host guarantees: each engine is fed every commit it consumes by a store subscription and
// caught up from its checkpoint in the background, so registering never waits for history; reads
// are read-your-writes (they wait until the pushes owed for every append that returned were
// delivered) and bounded by Config.MaxWait, past which a processor still catching up answers
// CATCHING_UP; processors whose claims fall due are revived by the alarm loop, including the
// claims a previous process left; a processor whose own emitted event conflicts is parked
// (PROCESSOR_PARKED) while the others keep running; an idle engine of a pattern is closed and
// reopens from its checkpoint, bounded by Config.IdleTimeout and Config.MaxOpenEngines.
type Host struct {
	store *stream.Store
	cfg   Config
	log   *slog.Logger
	fold  *foldState
	clock foldtype.Clock

	ctx    context.Context // ends at Shutdown: opens and catch-ups started by the host
	cancel context.CancelFunc
	wg     sync.WaitGroup // goroutines the host started

	leases  *leaseSet
	rows    rowCache    // the processor state rows, on an exclusive database (host/pause.go)
	metrics hostMetrics // running totals for metrics (metrics.go)

	hasPatterns  atomic.Bool
	woken        wokenSet                        // the streams this host woke, at most maxWokenRemembered (wakeOnce)
	refusing     atomic.Pointer[[]*registration] // registrations with RefuseInvalidEvents
	removeCheck  func()                          // removes the store's append check
	stopWatching func()
	stopCreated  func()

	mu       sync.Mutex
	exact    map[procKey]*registration
	patterns []*registration
	slots    map[procKey]*slot
	rebuilds map[procKey]*rebuildRun // the rebuilds running here (host/rebuild.go)
	lru      *list.List              // open slots of pattern registrations, most recently used first
	opening  map[procKey]bool
	openQ    []procKey
	openers  int
	// maxOpeners is how many goroutines open queued engines at once (openWorkers).
	maxOpeners int
	sweeper    func() bool
	shutdown   bool
	alarms     bool
	// bulkPage is how many streams a bulk verb lists at a time: stream.MaxListLimit when 0 (tests
	// set fewer, export_test.go).
	bulkPage int
}

type procKey struct{ path, slug string }

// ErrNotRegistered is returned for a (path, slug) with no registered processor. It matches by
// code: errors.Is(err, ErrNotRegistered) holds for every NOT_REGISTERED error.
var ErrNotRegistered = foldtype.ErrNotRegistered

// ErrShutdown is returned by a host that is shutting down.
var ErrShutdown = &foldtype.Error{Code: foldtype.CodeClosed, Message: "host is shut down"}

// ErrCatchingUp matches (with errors.Is) the error of a read whose processor did not reach the
// wanted point within Config.MaxWait (or the wait's own timeout). The error's Data holds "offset"
// (int64, the processor's reduced-through offset when the wait ended), "slug" and "path"; a
// server answers it with 503 and Retry-After, or 504 for waitUntilProcessed.
var ErrCatchingUp = foldtype.ErrCatchingUp

// ErrProcessorParked matches (with errors.Is) the error every read of a parked processor
// answers: the processor stopped after a conflict on one of its own emitted events (someone else
// holds its idempotency key with another body). The error unwraps to the cause, and its Data
// holds "slug", "path" and "cause" (the cause's message). Other processors keep running; a restart
// (or re-registration) tries again.
var ErrProcessorParked = foldtype.ErrProcessorParked

// New returns a host over store and, unless cfg.ManualAlarms, starts its alarm loop (one per
// store).
func New(store *stream.Store, cfg Config) (*Host, error) {
	if store == nil {
		return nil, errors.New("host: store is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxOpenEngines <= 0 {
		cfg.MaxOpenEngines = DefaultMaxOpenEngines
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.WarnInterval <= 0 {
		cfg.WarnInterval = DefaultWarnInterval
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
	if cfg.NodeID == "" {
		cfg.NodeID = newNodeID()
	}
	if cfg.CodeID == "" {
		cfg.CodeID = BuildCodeID()
	}
	clock := store.Clock()
	folder := newRepeatFolder(cfg.Logger.Handler(), clock, cfg.WarnInterval)
	h := &Host{
		store: store, cfg: cfg, log: slog.New(folder), fold: folder.st, clock: clock,
		exact: map[procKey]*registration{}, slots: map[procKey]*slot{}, rebuilds: map[procKey]*rebuildRun{}, lru: list.New(),
		opening: map[procKey]bool{}, maxOpeners: openWorkers(store.Driver().Exclusive()),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	lctx, lcancel := context.WithTimeout(h.ctx, cfg.LeaseTTL)
	// The state rows are read before any engine can open (on an exclusive database they are
	// cached: this process is their only writer).
	err := h.loadRows(lctx)
	if err == nil {
		err = h.startLeases(lctx)
	}
	lcancel()
	if err != nil {
		h.cancel()
		return nil, err
	}
	h.stopWatching = store.Events().WatchCommits(h.committed)
	h.stopCreated = store.Events().OnStreamCreated(h.created)
	if !cfg.ManualAlarms {
		if err := h.StartAlarms(); err != nil {
			h.stopWatching()
			h.stopCreated()
			h.leases.close()
			h.leases.leave().close()
			h.cancel()
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
	if err := h.store.Events().StartAlarms(h.revive); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	h.alarms = true
	return nil
}

// Shutdown stops the host: no processor is added any more, the alarm loop stops (running revives
// get their context cancelled and are waited for), every engine stops taking work (the event in
// progress finishes and is checkpointed; the rest is left to the next owner), and each engine on
// its own has its pending pushes settled, its subscription closed, its in-flight work settled, is
// closed and hands its lease over — or ctx ends. It returns the first error. Reads through the
// host fail with ErrShutdown from then on; the store stays open.
func (h *Host) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return nil
	}
	h.shutdown = true
	begun := time.Now()
	alarms := h.alarms
	if h.sweeper != nil {
		h.sweeper()
		h.sweeper = nil
	}
	h.openQ, h.opening = nil, map[procKey]bool{}
	h.mu.Unlock()
	h.stopWatching()
	h.stopCreated()
	h.mu.Lock()
	if h.removeCheck != nil {
		h.removeCheck()
		h.removeCheck = nil
	}
	h.mu.Unlock()
	if alarms {
		h.store.Events().StopAlarms()
	}
	// Other nodes stop preferring this one at once; the leases below are handed over as their
	// engines close, in groups (renewals go on meanwhile).
	lv := h.leases.leave()
	defer h.leases.close()
	// On a shared database every engine stops taking work at once (the event in progress
	// finishes and is checkpointed), then settles, closes and hands its lease over on its own, so
	// another node takes it as soon as this engine can run no effect any more; catch-ups and
	// retries on the chains stop after their event in progress. On an exclusive database (SQLite)
	// no other node takes over, so the engines finish the work already queued and a clean
	// shutdown leaves nothing behind the checkpoints. Either way, opens in progress see the
	// shutdown and close what they built, and in-flight work settles for as long as ctx allows
	// (the leases are renewed meanwhile): cut short after its effects but before its checkpoint,
	// the next owner would run those effects again.
	handOver := !h.store.Driver().Exclusive()
	h.mu.Lock()
	var slots []*slot
	var parked []*slot
	for _, sl := range h.slots {
		sl.stopRetryLocked()
		if handOver && (sl.state == slotOpen || sl.state == slotClosing) {
			if st, ok := sl.runner.(workStopper); ok {
				st.StopTakingWork()
			}
		}
		switch sl.state {
		case slotOpen:
			sl.state = slotClosing
			slots = append(slots, sl)
		case slotParked:
			parked = append(parked, sl)
		}
	}
	h.mu.Unlock()
	var cmu sync.Mutex
	var errs []error
	addErr := func(err error) {
		cmu.Lock()
		errs = append(errs, err)
		cmu.Unlock()
	}
	var cwg sync.WaitGroup
	for _, sl := range parked {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			select {
			case <-sl.closed:
				lv.release(sl.key, sl.lease.Generation)
			case <-ctx.Done():
				addErr(fmt.Errorf("host: close parked engines: %w", ctx.Err()))
			}
		}()
	}
	for _, sl := range slots {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			if err := sl.sub.Drain(ctx); err != nil {
				addErr(fmt.Errorf("host: drain pushes to %q on %q: %w", sl.key.slug, sl.key.path, err))
			}
			settled, err := settleAndClose(ctx, sl.runner, 0, false)
			if err != nil {
				addErr(fmt.Errorf("host: close %q on %q: %w", sl.key.slug, sl.key.path, err))
			}
			if !settled && handOver {
				h.leaveToRunOut(sl)
				return
			}
			lv.release(sl.key, sl.lease.Generation)
		}()
	}
	cwg.Wait()
	stopped := time.Since(begun)
	lv.close()
	h.log.Debug("host: handed the processors over", "engines", len(slots), "stopped", stopped,
		"released", time.Since(begun)-stopped)
	// Opens, catch-ups and closes still in progress finish (cancelled only when ctx ends).
	idle := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	h.cancel()
	<-idle
	h.fold.close()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// workStopper is an engine that can stop taking work before it drains ([foldstream.Engine]).
type workStopper interface{ StopTakingWork() }

// closeRunner closes an engine: its running work and background attempts are cancelled and waited
// for; a claim they held stays, so the next engine on the stream revives that work.
func closeRunner(ctx context.Context, r foldtype.Runner) error {
	return r.Close(ctx)
}

// settleAndClose closes a hosted engine whose subscription was drained. Every unit already on its
// chain finishes first — with catchUp, a catch-up queues behind them (and, at the head, runs
// nothing) — and then the work they left in flight (background attempts, blocking effects)
// settles for at most drainFor (0: until ctx ends), because Close would cancel a running unit
// after its effects but before its checkpoint, and the next engine on the stream (on this node
// or, after a handoff, another) would run those effects again. Without catchUp (a shutdown) it reads no new events:
// what was committed after the subscription closed is the next owner's. The lease is renewed
// meanwhile.
//
// settled reports whether the in-flight work finished before the engine closed. When it did not,
// Close cut a unit short — perhaps after its effects, with its checkpoint still on its way to the
// database — and a caller on a shared database lets the lease run out instead of handing it over
// (leaveToRunOut), so that checkpoint can land before another node reads it.
func settleAndClose(ctx context.Context, r foldtype.Runner, drainFor time.Duration, catchUp bool) (settled bool, err error) {
	if catchUp {
		if err := r.CatchUpFromLog(ctx); err != nil && ctx.Err() != nil {
			_ = r.Close(ctx)
			return false, err
		}
	}
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if drainFor > 0 {
		dctx, cancel = context.WithTimeout(ctx, drainFor)
	}
	derr := r.Drain(dctx)
	cancel()
	return derr == nil, r.Close(ctx)
}

// releaseAfterClose gives sl's lease up once its engine closed (idle as for leaseSet.release), or,
// on a shared database when its work did not settle, leaves it to run out (leaveToRunOut).
func (h *Host) releaseAfterClose(sl *slot, settled, idle bool) {
	if !settled && !h.store.Driver().Exclusive() {
		h.leaveToRunOut(sl)
		return
	}
	h.leases.release(sl.key, sl.lease.Generation, idle)
}

// leaveToRunOut forgets sl's lease without releasing it: its engine closed before its work
// settled (settleAndClose), so the lease runs out on the database's clock — one lease time at
// most — before another node takes the stream, instead of at once. A checkpoint the cut-short
// unit had sent meanwhile lands first (a write is not withdrawn when its caller goes), and the
// next owner does not run that unit's effects again.
func (h *Host) leaveToRunOut(sl *slot) {
	h.log.Warn("host: a processor's work did not settle before its engine closed; its lease is left to run out instead of handed over",
		"path", sl.key.path, "slug", sl.key.slug)
	h.leases.drop(sl.key, sl.lease.Generation)
}
