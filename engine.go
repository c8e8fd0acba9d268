package foldstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// Engine constants (docs/engine.md#background-work-and-claims, docs/engine.md#reading-the-state).
const (
	// EnginePageSize is the read limit of catch-up, gap repair and re-reduce.
	EnginePageSize = 500
	// DefaultWaitTimeout is WaitUntilProcessed's timeout when none is given.
	DefaultWaitTimeout = 10 * time.Second
	// RangeCommitAfter is how long a page the engine read itself (catch-up, gap repair) runs, by
	// the engine's clock, before it commits the events it processed so far and goes on with the
	// rest (docs/engine.md#committing-a-range): a crash in the middle of a long catch-up runs at
	// most about this much of its effects again. A pushed batch always commits once, whole.
	RangeCommitAfter = time.Second
)

// EngineConfig holds an engine's dependencies and options. Every option is declared, defaulted and
// documented here; [NewEngine] applies the defaults.
type EngineConfig struct {
	// Stream is the stream the engine reads, appends to and claims on. Required.
	Stream Stream
	// Checkpoints stores the reduce checkpoint. Required.
	Checkpoints CheckpointStorage
	// FedByPushes is the host's word that a subscription pushes this engine every commit it
	// consumes; it lets an idle engine trust the head it read from the log
	// (docs/engine.md#reading-the-state). Defaults to false.
	FedByPushes bool
	// Clock supplies time for claims, the live-state revision epoch and WaitUntilProcessed's
	// timeout. Defaults to foldtype.SystemClock{}.
	Clock Clock
	// Reporter receives contained failures (docs/engine.md#errors-and-reporting). Defaults to
	// SlogReporter(Logger).
	Reporter Reporter
	// Logger is used by the default reporter. Defaults to slog.Default().
	Logger *slog.Logger
	// KeyValue, when set, keeps the work-started marker that counts how often background work
	// died with its host (docs/engine.md#work-that-keeps-dying); Revive then fails with
	// PERMANENT_FAILURE after MaxDeaths deaths on the same CodeID. Nil (the default) counts
	// nothing. [CheckpointKeyValue] keeps it beside the checkpoint; the host sets it.
	KeyValue KeyValue
	// CodeID names the code the engine runs (a build): deaths of work under another CodeID are
	// not counted against this one. Used only with KeyValue.
	CodeID string
	// LoopLimit is the deepest cause chain an emit may extend (docs/engine.md#cause-chains): an
	// emit deeper than it is not appended; the loop-limit fact is recorded instead. Defaults to
	// DefaultLoopLimit (32).
	LoopLimit int
	// TracerProvider, when set, traces every ProcessEvent call with a span of its own
	// (docs/engine.md#tracing), the child of the W3C trace context in the event's metadata when it
	// carries one; ProcessEventArgs.Context is the span's context, for the effects' own spans.
	// Defaults to nil: no spans and no cost.
	TracerProvider trace.TracerProvider
	// MayWork, when set, is asked before every unit of work that can start an effect: each
	// ProcessEvent (the eventless pass too), each blocker, each background attempt and, unless
	// CheckpointsFenced, each checkpoint write (docs/reliability.md#a-node-that-freezes). A non-nil answer stops that
	// work before it starts: the range in progress ends with that error and nothing of it is
	// checkpointed. A host sets it to its lease's check, so an engine whose node froze past its
	// lease runs nothing once it wakes until the lease is confirmed still its own. It may block
	// (a host confirms a lease whose local deadline passed with the database) and must honour
	// ctx. Nil (the default) lets every unit run.
	MayWork func(ctx context.Context) error
	// CheckpointsFenced is the word of whoever set MayWork that Checkpoints itself refuses the
	// writes of an engine whose lease moved on (a host's checkpoints carry the lease's
	// generation, checked inside the write's transaction). MayWork is then not asked before a
	// checkpoint write: the range that ran is recorded whenever nobody took the lease over,
	// even when its holder cannot confirm the lease in time, rather than run again, effects and
	// all, by the next owner (docs/reliability.md#a-node-that-freezes).
	CheckpointsFenced bool
	// WriteRetry is how long the engine keeps sending again a write of its own — a checkpoint, a
	// batch ProcessEvent or a blocker emits — that the store refused because its database could
	// not be reached (code UNAVAILABLE), or whose commit it could not confirm
	// (COMMIT_OUTCOME_UNKNOWN) when sending it again cannot store it twice, before the range
	// fails with that error (docs/engine.md#writes-through-a-database-blip). The range's
	// effects then do not run again because of a blip. Defaults to DefaultWriteRetry (30 s);
	// negative: no write is sent again.
	WriteRetry time.Duration
	// Metrics, when set, receives the counts of the engine's work: events processed (with the
	// duration of each ProcessEvent), skipped and emitted, and ProcessEvent failures by code. A
	// host keeps them per processor, beyond this engine's life. Defaults to nil: nothing counted.
	Metrics EngineMetrics
}

// withDefaults returns c with every unset option at its default.
func (c EngineConfig) withDefaults() EngineConfig {
	if c.Clock == nil {
		c.Clock = foldtype.SystemClock{}
	}
	if c.Reporter == nil {
		c.Reporter = SlogReporter(c.Logger)
	}
	if c.LoopLimit <= 0 {
		c.LoopLimit = DefaultLoopLimit
	}
	if c.WriteRetry == 0 {
		c.WriteRetry = DefaultWriteRetry
	}
	return c
}

// Snapshot is an engine's cursor and reduced state, read together ([Engine.Snapshot]); the same
// shape with the state as JSON is what [Engine.SnapshotJSON] and a host hand out.
type Snapshot[S any] = foldtype.Snapshot[S]

// *Engine is the non-generic view of itself a host holds.
var _ foldtype.Runner = (*Engine[struct{}])(nil)

type staleCheckpoint[S any] struct {
	cursor int64
	state  S
}

type unit struct {
	ctx  context.Context
	run  func(ctx context.Context) error
	done chan error
}

type waiter struct {
	offset int64
	ch     chan struct{}
}

// Engine drives one processor against one stream and one checkpoint storage
// (docs/engine.md#engine-rules). All its methods are safe for concurrent use.
//
// Concurrency rules (docs/engine.md#engine-rules), kept in one place: every unit of work — a push,
// a catch-up, revive's eventless pass — runs on one serial chain (a FIFO queue drained by one
// goroutine at a time); within a unit events are processed one at a time and each event's blockers
// settle before the next event's ProcessEvent; background attempts run on their own goroutines and
// hold a claim while any is in flight; claims are issued on their own serial chain; a range
// commits once, after all its blocking work settled (a page the engine read itself that runs
// longer than RangeCommitAfter in parts, each after the blocking work of its events settled).
type Engine[S any] struct {
	p       Processor[S]
	c       *Contract[S]
	stream  Stream
	cps     CheckpointStorage
	fed     bool
	clock   Clock
	mayWork func(ctx context.Context) error
	// cpFenced: EngineConfig.CheckpointsFenced.
	cpFenced bool
	rep      Reporter
	consumes []string
	emits    []string
	live     *LiveState
	tracer   trace.Tracer // nil: no spans (EngineConfig.TracerProvider)
	metrics  EngineMetrics
	// stopping is set by StopTakingWork: a range stops after the event in progress.
	stopping atomic.Bool

	pubMu sync.Mutex
	mu    sync.Mutex
	state S
	// liveGen (under pubMu) is the live state's write count after the engine's last publish;
	// liveChanged (under mu) the members the reduces declared changed since, liveWhole that a
	// reduce changed the state without declaring (docs/engine.md#declared-changes). reduceDecl is
	// the chain's collector for one reduce.
	liveGen     uint64
	liveChanged []string
	liveWhole   bool
	reduceDecl  liveDecl
	// declaring (under mu): a reduce of this engine declared its changes, so a publish with none
	// declared and none undeclared has nothing to encode.
	declaring bool
	cursor    int64
	// pubState and pubCursor are what callers see (Snapshot, ReducedThroughOffset,
	// WaitUntilProcessed): the chain's state and cursor, copied only after the live state of that
	// state was published, so a caller who saw offset n never reads an older live state.
	pubState         S
	pubCursor        int64
	hasPushed        bool
	pushedThrough    int64
	hasHeadRead      bool
	headRead         int64
	lastBatchAtHead  bool
	stale            *staleCheckpoint[S]
	latch            error
	waiters          map[*waiter]struct{}
	queue            []*unit
	running          bool
	active           int // 1 while a unit runs
	inFlight         int
	revivesWhileBusy int
	kv               KeyValue
	codeID           string
	loopLimit        int
	workFailed       *Error // PERMANENT_FAILURE judged at construction; cleared by the next event
	skips            skipState
	failure          *ProcessEventError // the last ProcessEvent failure since a range committed
	log              *slog.Logger
	retry            writeRetry // EngineConfig.WriteRetry
	claimTail        chan struct{}
	changed          chan struct{}

	// closed is set by Close. closing is closed by Close and ends every chain unit's and every
	// background attempt's context (see [Engine.Close]).
	closed      bool
	closing     context.Context
	stopClosing context.CancelFunc
}

// NewEngine loads p's checkpoint and returns its engine (docs/engine.md#loading-the-checkpoint).
// It fails only when the checkpoint cannot be read or decoded; a failing live-state projection is
// reported and never fails construction.
func NewEngine[S any](p Processor[S], cfg EngineConfig) (*Engine[S], error) {
	if p == nil || p.Contract() == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidContract, nil, "engine: the processor has no contract")
	}
	if cfg.Stream == nil || cfg.Checkpoints == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidContract, nil, "engine: Stream and Checkpoints are required")
	}
	cfg = cfg.withDefaults()
	c := p.Contract()
	e := &Engine[S]{
		p: p, c: c, stream: cfg.Stream, cps: cfg.Checkpoints, fed: cfg.FedByPushes,
		clock: cfg.Clock, mayWork: cfg.MayWork, cpFenced: cfg.CheckpointsFenced, rep: cfg.Reporter, log: cfg.Logger, consumes: c.Consumes(), emits: c.Emits(), kv: cfg.KeyValue, codeID: cfg.CodeID, loopLimit: cfg.LoopLimit,
		waiters: map[*waiter]struct{}{}, claimTail: closedChan(), changed: make(chan struct{}),
	}
	if cfg.TracerProvider != nil {
		e.tracer = cfg.TracerProvider.Tracer(TracerName)
	}
	e.metrics = cfg.Metrics
	e.retry = writeRetry{clock: cfg.Clock, limit: cfg.WriteRetry, log: cfg.Logger, slug: c.Slug(), waits: &storeWaits{}}
	e.closing, e.stopClosing = context.WithCancel(context.Background())
	cp, ok, err := e.cps.ReadCheckpoint(context.Background(), c.Slug())
	if err != nil {
		return nil, fmt.Errorf("engine %q: %w", c.Slug(), err)
	}
	e.state = c.InitialState()
	if ok {
		st := c.InitialState()
		if cp.State != nil {
			var decoded S
			if err := rawjson.UnmarshalExact(cp.State, &decoded); err == nil {
				st = decoded
			} else if cp.ReducerVersion == c.Version() {
				return nil, fmt.Errorf("engine %q: decode checkpoint state: %w", c.Slug(), err)
			} else {
				// Another version's state may have another shape; it only seeds the live state
				// until the re-reduce replaces it.
				report(e.rep, SiteCheckpoint, err, slog.String("slug", c.Slug()))
			}
		}
		if cp.ReducerVersion == c.Version() {
			e.state, e.cursor = st, cp.ReducedThroughOffset
		} else {
			e.stale = &staleCheckpoint[S]{cursor: cp.ReducedThroughOffset, state: st}
		}
	}
	if err := e.countDeath(context.Background()); err != nil {
		return nil, err
	}
	e.pubState, e.pubCursor = e.state, e.cursor
	seedFrom := e.state
	if e.stale != nil {
		seedFrom = e.stale.state
	}
	seed, err := e.project(seedFrom)
	if err != nil {
		seed = nil
	}
	e.live = NewLiveState(e.stream, c.Slug(), seed, LiveStateConfig{Clock: e.clock, Reporter: e.rep})
	e.liveWhole = e.stale != nil // the seed is the old version's view until the re-reduce
	return e, nil
}

// Processor returns the processor.
func (e *Engine[S]) Processor() Processor[S] { return e.p }

// Slug returns the contract's slug.
func (e *Engine[S]) Slug() string { return e.c.Slug() }

// Consumes returns the contract's consumes list.
func (e *Engine[S]) Consumes() []string { return e.c.Consumes() }

// LiveState returns the engine's live-state holder.
func (e *Engine[S]) LiveState() *LiveState { return e.live }

// ReducedThroughOffset returns the cursor as callers see it: an offset is reported only after the
// live state of its state was published.
func (e *Engine[S]) ReducedThroughOffset() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pubCursor
}

// chainCursor returns the chain's own cursor, which may be ahead of the published one while a unit
// publishes.
func (e *Engine[S]) chainCursor() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cursor
}

// publishAndRelease publishes the live state of the chain's state, then shows that state and cursor
// to callers and releases the waiters it satisfies. In this order a caller released at offset n, or
// reading a snapshot at n, finds the live state of n (or a later one) already published.
func (e *Engine[S]) publishAndRelease() {
	e.PublishLiveState()
	e.mu.Lock()
	e.pubState, e.pubCursor = e.state, e.cursor
	e.resolveWaitersLocked()
	e.mu.Unlock()
}

// Pending returns the number of chain units queued or running (a gauge for hosts and tests).
func (e *Engine[S]) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue) + e.active
}

// signalLocked wakes Drain callers (and tests watching Pending); e.mu must be held.
func (e *Engine[S]) signalLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// enqueue appends a unit to the serial chain (docs/engine.md#the-latch) and returns its outcome
// channel. Before a unit runs, a latched refusal fails it at once; a failed unit never wedges the
// chain.
func (e *Engine[S]) enqueue(ctx context.Context, run func(ctx context.Context) error) <-chan error {
	u := &unit{ctx: ctx, run: run, done: make(chan error, 1)}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		u.done <- e.closedError()
		return u.done
	}
	e.queue = append(e.queue, u)
	e.signalLocked()
	if !e.running {
		e.running = true
		chainWorkers.run(e.work)
	}
	e.mu.Unlock()
	return u.done
}

func (e *Engine[S]) work() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.running = false
			e.signalLocked()
			e.mu.Unlock()
			return
		}
		u := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		latch, closed := e.latch, e.closed
		e.active = 1
		e.mu.Unlock()
		var err error
		switch {
		case closed:
			err = e.closedError()
		case latch != nil:
			err = latch
		case u.ctx.Err() != nil:
			err = u.ctx.Err()
		default:
			ctx, stop := e.bindToClose(u.ctx)
			err = callGuarded(func() error { return u.run(ctx) })
			stop()
		}
		e.mu.Lock()
		e.active = 0
		e.signalLocked()
		e.mu.Unlock()
		u.done <- err
	}
}

// bindToClose returns ctx, cancelled also when the engine closes.
func (e *Engine[S]) bindToClose(ctx context.Context) (context.Context, func()) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.closing, cancel)
	return c, func() { stop(); cancel() }
}

func (e *Engine[S]) closedError() *Error {
	return foldtype.NewError(foldtype.CodeClosed, map[string]any{"slug": e.c.Slug()}, "engine %s is closed", quoteJSON(e.c.Slug()))
}

func (e *Engine[S]) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// StopTakingWork makes the engine take no new work, for a shutdown that hands its stream to
// another node: the event in progress finishes with its effects, the checkpoint is written
// through it, and every later range (a queued push, the rest of a catch-up) processes nothing,
// so a [Engine.Drain] that follows returns as soon as that event settled. The events not
// processed stay behind the checkpoint for the next engine on the stream. Live-state deltas not
// yet appended are dropped, and none is published any more: the next engine's live state starts
// a new revision chain, which its readers re-seed from, so the Drain waits for no delta appends
// behind a busy writer. It cannot be undone; call Close after the Drain.
func (e *Engine[S]) StopTakingWork() {
	e.stopping.Store(true)
	if e.live != nil {
		e.live.stopPublishing()
	}
}

// Close stops the engine: later calls fail with code CLOSED (foldtype.ErrClosed), queued units fail with it
// without running, waiters of WaitUntilProcessed are released with it, and the contexts of the
// running unit (its blockers included) and of every background attempt are cancelled. Close then
// waits until the running unit, the background attempts, the claims and the live-state deltas have
// settled, or ctx ends (it returns ctx.Err() then; call it again to keep waiting).
//
// A claim taken for background work is never released after Close: work that Close cancelled is
// revived by the next incarnation, whose at-head pass recovers it from state. Its work-started
// marker is deleted once it settled: work stopped on purpose is not counted as a death
// (docs/engine.md#work-that-keeps-dying). Close is idempotent.
func (e *Engine[S]) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.signalLocked()
	e.mu.Unlock()
	e.stopClosing()
	return e.Drain(ctx)
}

func await(ctx context.Context, ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProcessEventBatch is a push (docs/engine.md#pushes-and-gap-repair): it records range.Through as
// the pushed head at once, then queues a unit that runs a pending re-reduce, repairs a gap below
// range.After from the log, and reduces and commits the pushed events. No push is discarded: a
// push behind the cursor still delivers its ephemerals, and a push whose ctx ends while it waits
// for its turn still runs (with ctx's values but not its cancellation) — ProcessEventBatch then
// returns ctx.Err() at once, not the push's outcome.
func (e *Engine[S]) ProcessEventBatch(ctx context.Context, events []Event, r ScannedRange) error {
	return e.QueueEventBatch(ctx, events, r)(ctx)
}

// QueueEventBatch is ProcessEventBatch split in two: the push's head is recorded and the push
// queued on the serial chain before it returns; the returned function waits for its outcome. A
// stream stand-in (testsupport's MemoryStream) uses it to push fire-and-forget while keeping the
// pushes in commit order.
func (e *Engine[S]) QueueEventBatch(ctx context.Context, events []Event, r ScannedRange) func(context.Context) error {
	e.mu.Lock()
	if !e.hasPushed || r.Through > e.pushedThrough {
		e.pushedThrough = r.Through
	}
	e.hasPushed = true
	e.mu.Unlock()
	evs := slices.Clone(events)
	// A push is never discarded (docs/engine.md#pushes-and-gap-repair): its ephemerals ride only
	// this push, so it runs even when the caller stops waiting for it.
	ch := e.enqueue(context.WithoutCancel(ctx), func(ctx context.Context) error { return e.runPush(ctx, evs, r) })
	return func(wctx context.Context) error { return await(wctx, ch) }
}

func (e *Engine[S]) runPush(ctx context.Context, events []Event, r ScannedRange) error {
	if err := e.rereduceIfStale(ctx); err != nil {
		return err
	}
	for {
		if e.stopping.Load() {
			return nil // the rest is the next engine's
		}
		cursor := e.chainCursor()
		if cursor >= r.After {
			break
		}
		page, err := e.stream.Read(ctx, cursor, EnginePageSize)
		if err != nil {
			return err
		}
		if page.ScannedThroughOffset <= cursor {
			break // the rest below r.After were ephemerals: nothing durable to heal
		}
		var evs []Event
		for _, ev := range page.Events {
			if ev.Offset <= r.After {
				evs = append(evs, ev)
			}
		}
		through := min(page.ScannedThroughOffset, r.After)
		if err := e.commitRange(ctx, evs, ScannedRange{After: cursor, Through: through}, false, true); err != nil {
			return err
		}
	}
	e.mu.Lock()
	atHead := r.Through >= e.pushedThrough
	e.mu.Unlock()
	return e.commitRange(ctx, events, r, atHead, false)
}

// CatchUpFromLog reads the log from the cursor in pages of EnginePageSize and reduces and commits
// each page until one is at head (docs/engine.md#catch-up). An empty catch-up runs no at-head pass.
func (e *Engine[S]) CatchUpFromLog(ctx context.Context) error {
	return await(ctx, e.enqueue(ctx, e.runCatchUp))
}

func (e *Engine[S]) runCatchUp(ctx context.Context) error {
	if err := e.rereduceIfStale(ctx); err != nil {
		return err
	}
	for {
		if e.stopping.Load() {
			return nil // the rest is the next engine's
		}
		cursor := e.chainCursor()
		page, err := e.stream.Read(ctx, cursor, EnginePageSize)
		if err != nil {
			return err
		}
		if page.ScannedThroughOffset <= cursor {
			if page.AtHead {
				e.recordHeadRead()
			}
			return nil
		}
		if err := e.commitRange(ctx, page.Events, ScannedRange{After: cursor, Through: page.ScannedThroughOffset}, page.AtHead, true); err != nil {
			return err
		}
		if page.AtHead {
			e.recordHeadRead()
			return nil
		}
	}
}

func (e *Engine[S]) recordHeadRead() {
	if !e.fed {
		return
	}
	e.mu.Lock()
	e.headRead = max(e.headRead, e.cursor)
	e.hasHeadRead = true
	e.mu.Unlock()
}

// commitRange is reduce-and-commit of one range (docs/engine.md#committing-a-range). ownPage: the
// range is a page the engine read itself (catch-up, gap repair), whose end is the engine's choice,
// so one running past RangeCommitAfter commits in parts; a pushed batch commits once, whole.
func (e *Engine[S]) commitRange(ctx context.Context, events []Event, r ScannedRange, atHead, ownPage bool) error {
	e.mu.Lock()
	before, state := e.cursor, e.state
	e.mu.Unlock()
	var consumable []Event
	for _, ev := range events {
		if reducesEvent(e.consumes, ev) && (ev.Ephemeral || ev.Offset > before) {
			consumable = append(consumable, ev)
		}
	}
	changed, delivered := false, false
	seg, segStart := 0, e.clock.Now() // the first consumable event not committed yet, and when its part began
	for i := range consumable {
		if e.stopping.Load() {
			// Stopped taking work: the checkpoint covers the events processed so far only.
			events, r.Through, atHead = processedThrough(events, consumable[seg:i], before), processedCursor(consumable[seg:i], before), false
			break
		}
		if ownPage && i > seg && e.clock.Now().Sub(segStart) >= RangeCommitAfter {
			// A long page (a catch-up over a backlog of slow effects) commits what it processed
			// so far, as if the page had ended there, so a crash runs at most about
			// RangeCommitAfter of its effects again.
			if cur := processedCursor(consumable[seg:i], before); cur > before {
				if err := e.persist(ctx, processedThrough(events, consumable[seg:i], before), before, cur, state, changed, false); err != nil {
					return err
				}
				before, changed, seg, segStart = cur, false, i, e.clock.Now()
			}
		}
		caughtUp := atHead && i == len(consumable)-1
		next, ch, processed, err := e.step(ctx, &consumable[i], state, caughtUp)
		if err != nil {
			return err
		}
		if ch {
			state, changed = next, true
		}
		if caughtUp && processed {
			delivered = true
		}
	}
	if atHead && !delivered && !e.stopping.Load() {
		if _, _, _, err := e.step(ctx, nil, state, true); err != nil {
			return err
		}
	}
	return e.persist(ctx, events, before, max(before, r.Through), state, changed, atHead)
}

// persist writes the checkpoint of a committed range (or of the part of one done so far) through
// newCursor, then adopts its state and cursor and publishes them
// (docs/engine.md#committing-a-range).
func (e *Engine[S]) persist(ctx context.Context, events []Event, before, newCursor int64, state S, changed, atHead bool) error {
	hasDurable := slices.ContainsFunc(events, func(ev Event) bool { return !ev.Ephemeral })
	if hasDurable && newCursor > before {
		if !e.cpFenced {
			if err := e.checkMayWork(ctx); err != nil {
				return err
			}
		}
		cp := Checkpoint{ReducerVersion: e.c.Version(), ReducedThroughOffset: newCursor}
		if changed {
			b, err := marshalJSON(state)
			if err != nil {
				return fmt.Errorf("engine %q: marshal state: %w", e.c.Slug(), err)
			}
			cp.State = b
		}
		if err := e.writeCheckpoint(ctx, cp, changed); err != nil {
			return err
		}
	}
	e.mu.Lock()
	if changed {
		e.state = state
	}
	e.cursor = newCursor
	e.lastBatchAtHead = atHead
	e.clearPassedFailureLocked(newCursor, atHead)
	e.mu.Unlock()
	e.publishAndRelease()
	return nil
}

// processedCursor is the cursor after the consumable events done of a range cut short: the offset
// of the last durable one, or before.
func processedCursor(done []Event, before int64) int64 {
	cur := before
	for _, ev := range done {
		if !ev.Ephemeral {
			cur = max(cur, ev.Offset)
		}
	}
	return cur
}

// processedThrough is the events of a range cut short that its checkpoint covers: those up to the
// last durable consumable event done.
func processedThrough(events, done []Event, before int64) []Event {
	cur := processedCursor(done, before)
	var out []Event
	for _, ev := range events {
		if !ev.Ephemeral && ev.Offset <= cur {
			out = append(out, ev)
		}
	}
	return out
}

// writeCheckpoint writes cp, sending it again through a database blip (a checkpoint written twice
// is as written once; docs/engine.md#writes-through-a-database-blip), and latches a refusal that
// retrying cannot fix (docs/engine.md#the-latch). Unless checkpoints are fenced, MayWork is asked
// again before every new attempt, as before the first.
func (e *Engine[S]) writeCheckpoint(ctx context.Context, cp Checkpoint, changed bool) error {
	err := e.cps.WriteCheckpoint(ctx, e.c.Slug(), cp, changed)
	if err != nil {
		var guard func(context.Context) error
		if !e.cpFenced {
			guard = e.checkMayWork
		}
		err = e.retry.after(ctx, err, "checkpoint", always, guard, func() error {
			return e.cps.WriteCheckpoint(ctx, e.c.Slug(), cp, changed)
		})
	}
	if err != nil && !foldtype.IsRetryable(err) {
		e.mu.Lock()
		e.latch = err
		e.mu.Unlock()
	}
	return err
}

func (e *Engine[S]) resolveWaitersLocked() {
	for w := range e.waiters {
		if w.offset <= e.pubCursor {
			close(w.ch)
			delete(e.waiters, w)
		}
	}
}

// normalizeAndReduce is docs/engine.md#payload-schemas, shared by the live path and the re-reduce.
// ok=false means the event is invalid and must be skipped.
func (e *Engine[S]) normalizeAndReduce(ev *Event, state S) (next S, changed bool, payload any, ok bool) {
	norm, typed, err := e.c.Normalize(*ev)
	if err != nil {
		e.noteSkip(SiteReducePayload, ev, err, nil)
		return state, false, nil, false
	}
	*ev = norm
	var out S
	var ch bool
	e.reduceDecl.declared, e.reduceDecl.pointers = false, e.reduceDecl.pointers[:0]
	err, _, stack := guardedStack(func() error {
		var rerr error
		out, ch, rerr = e.p.Reduce(ReduceArgs[S]{Event: norm, Payload: typed, State: state, decl: &e.reduceDecl})
		return rerr
	})
	if err != nil {
		e.noteSkip(SiteReduce, ev, err, stack)
		return state, false, typed, true
	}
	if !ch {
		return state, false, typed, true
	}
	e.noteLiveChange()
	return out, true, typed, true
}

// maxDeclaredChanges bounds the declarations kept between two publishes: past it the publish
// compares the whole view, which then costs no more than splicing that many members.
const maxDeclaredChanges = 256

// noteLiveChange records what the reduce that just changed the state declared, and resets the
// chain's collector.
func (e *Engine[S]) noteLiveChange() {
	d := &e.reduceDecl
	e.mu.Lock()
	if d.declared {
		e.declaring = true
	}
	if !d.declared || e.liveWhole || len(e.liveChanged)+len(d.pointers) > maxDeclaredChanges {
		e.liveWhole, e.liveChanged = true, e.liveChanged[:0]
	} else {
		e.liveChanged = append(e.liveChanged, d.pointers...)
	}
	e.mu.Unlock()
}

// step is the per-event primitive (docs/engine.md#blockers); ev nil is the eventless pass.
func (e *Engine[S]) step(ctx context.Context, ev *Event, state S, caughtUp bool) (S, bool, bool, error) {
	prev := state
	changed := false
	var payload any
	if ev == nil && e.hasWorkFailed() {
		// Work that kept dying is not started again until an event arrives
		// (docs/engine.md#work-that-keeps-dying): no eventless pass runs meanwhile.
		return state, false, true, nil
	}
	if ev != nil {
		e.clearWorkFailed()
		next, ch, typed, ok := e.normalizeAndReduce(ev, state)
		if !ok {
			return state, false, false, nil
		}
		state, changed, payload = next, ch, typed
	}
	if err := e.checkMayWork(ctx); err != nil {
		return prev, false, false, err // not this engine's work any more, or not yet known to be
	}
	runCtx, span := startProcessEventSpan(ctx, e.tracer, e.c.Slug(), ev)
	var began time.Time
	if e.metrics != nil && ev != nil {
		began = e.clock.Now()
	}
	run := &eventRun{ctx: runCtx, stream: e.stream, slug: e.c.Slug(), version: e.c.Version(),
		emits: e.emits, event: ev, loopLimit: e.loopLimit, background: e.runInBackground, mayWork: e.checkMayWork, metrics: e.metrics,
		tracer: e.tracer, retry: e.retry}
	args := &ProcessEventArgs[S]{Event: ev, Payload: payload, State: state, PreviousState: prev,
		Delivery: Delivery{CaughtUp: caughtUp}, run: run}
	if err, panicked, stack := guardedStack(func() error { return e.p.ProcessEvent(args) }); err != nil && !isRecordedLoopLimit(err) {
		run.mu.Lock()
		run.settled = true
		run.mu.Unlock()
		endSpan(span, err)
		return prev, false, false, e.noteProcessFailure(ev, err, panicked, stack)
	}
	if err := run.drain(); err != nil {
		endSpan(span, err)
		if _, refused := errors.AsType[*mayNotWorkError](err); refused {
			return prev, false, false, err // the blockers did not fail: they were not allowed to run
		}
		return prev, false, false, e.noteProcessFailure(ev, err, false, nil)
	}
	endSpan(span, nil)
	if e.metrics != nil && ev != nil {
		e.metrics.EventProcessed(e.clock.Now().Sub(began))
	}
	return state, changed, true, nil
}

// rereduceIfStale is the one-time reduce-only re-reduce after a version bump
// (docs/engine.md#re-reduce).
func (e *Engine[S]) rereduceIfStale(ctx context.Context) error {
	e.mu.Lock()
	st := e.stale
	e.mu.Unlock()
	if st == nil {
		return nil
	}
	target := st.cursor
	state, _, err := e.foldThrough(ctx, target)
	if err != nil {
		return err
	}
	b, err := marshalJSON(state)
	if err != nil {
		return fmt.Errorf("engine %q: marshal state: %w", e.c.Slug(), err)
	}
	if err := e.writeCheckpoint(ctx, Checkpoint{ReducerVersion: e.c.Version(), ReducedThroughOffset: target, State: b}, true); err != nil {
		return err
	}
	e.mu.Lock()
	e.state, e.cursor, e.stale = state, target, nil
	e.liveWhole = true // the live view was seeded from the old version's state
	e.mu.Unlock()
	e.publishAndRelease()
	return nil
}

// runInBackground starts one droppable attempt (docs/engine.md#background-work-and-claims).
func (e *Engine[S]) runInBackground(ctx context.Context, work func(context.Context) error) {
	e.mu.Lock()
	e.inFlight++
	if e.inFlight == 1 {
		e.queueMarkerLocked(true) // the marker lands before the claim
		e.queueClaimLocked(e.clock.Now().Add(foldtype.ReviveAfter))
	}
	e.mu.Unlock()
	wctx, stop := e.bindToClose(context.WithoutCancel(ctx))
	go func() {
		err := e.checkMayWork(wctx)
		if err == nil {
			err = callGuarded(func() error { return work(wctx) })
		}
		stop()
		if err != nil {
			report(e.rep, SiteBackground, err, slog.String("slug", e.c.Slug()))
		}
		e.mu.Lock()
		e.inFlight--
		if e.inFlight == 0 && !e.closed {
			e.revivesWhileBusy = 0
			e.queueMarkerLocked(false)
			e.queueClaimLocked(time.Time{})
		} else if e.inFlight == 0 {
			// Close cancelled the work and it settled: the claim stays for the next incarnation to
			// revive it, but work stopped on purpose did not die with its host, so the marker goes
			// (docs/engine.md#work-that-keeps-dying).
			e.queueMarkerLocked(false)
		}
		e.signalLocked()
		e.mu.Unlock()
	}()
}

// queueClaimLocked issues claim(at) on the claim chain: after the previous claim settled, so a slow
// release never overtakes the next claim (docs/engine.md#background-work-and-claims). The zero
// time releases. e.mu must be held.
func (e *Engine[S]) queueClaimLocked(at time.Time) chan struct{} {
	prev, done := e.claimTail, make(chan struct{})
	e.claimTail = done
	go func() {
		defer close(done)
		<-prev
		if err := callGuarded(func() error { return e.stream.Claim(context.Background(), at) }); err != nil {
			report(e.rep, SiteClaim, err, slog.String("slug", e.c.Slug()))
		}
	}()
	return done
}

// Revive is the host's call for a claim that fell due (docs/engine.md#background-work-and-claims):
// an engine built after its work died with its host MaxDeaths times fails with PERMANENT_FAILURE
// (docs/engine.md#work-that-keeps-dying); otherwise catch up; if that ran no at-head range, run one eventless at-head pass; if work is still in
// flight, re-claim at now + min(foldtype.ReviveAfter×2^n, foldtype.ReviveAfterMax) and wait until that claim landed.
func (e *Engine[S]) Revive(ctx context.Context) error {
	if err := e.failedRevive(); err != nil {
		return err
	}
	e.mu.Lock()
	e.lastBatchAtHead = false
	e.mu.Unlock()
	if err := e.CatchUpFromLog(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	atHead := e.lastBatchAtHead
	e.mu.Unlock()
	if !atHead {
		err := await(ctx, e.enqueue(ctx, func(ctx context.Context) error {
			e.mu.Lock()
			state := e.state
			e.mu.Unlock()
			if _, _, _, err := e.step(ctx, nil, state, true); err != nil {
				return err
			}
			e.PublishLiveState()
			return nil
		}))
		if err != nil {
			return err
		}
	}
	e.mu.Lock()
	if e.inFlight == 0 {
		e.mu.Unlock()
		return nil
	}
	e.revivesWhileBusy++
	d := foldtype.ReviveAfterMax
	if n := e.revivesWhileBusy; n < 20 {
		d = min(foldtype.ReviveAfter<<n, foldtype.ReviveAfterMax)
	}
	done := e.queueClaimLocked(e.clock.Now().Add(d))
	e.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
