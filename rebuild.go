package foldstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// A rebuild beside the running version (docs/operations.md#rebuild-beside-the-running-version):
// the processor's next version folds the log with Reduce only into a checkpoint row of its own,
// [RebuildRow], while the engine of the current version keeps answering reads and running every
// effect. The switch is one unit of the running engine's serial chain at its cursor C: the
// current version ran the effects through C, the next one runs those after C, and one write
// replaces the processor's checkpoint row with the next version's state at C and deletes the
// side row. The rule lives here and in [Engine.handOver]; nothing else writes the side row.

// RebuildRow returns the checkpoint row in which version of processor slug is folded beside the
// running version: "<slug>@<version>".
func RebuildRow(slug, version string) string { return slug + "@" + version }

// CheckpointSwitcher is implemented by a [CheckpointStorage] that replaces one row and deletes
// another in one write, as a rebuild's switch needs (the store's checkpoints and
// [CheckpointTable] over a *sql.DB do). With a storage that does not, the switch writes the
// processor's row and then deletes nothing: the side row left behind is ignored, because the
// processor's row then holds the rebuilt version.
type CheckpointSwitcher interface {
	// SwitchCheckpoint writes slug's row as cp (state included) and deletes row remove, in one
	// write: after a crash either both happened or neither.
	SwitchCheckpoint(ctx context.Context, slug string, cp Checkpoint, remove string) error
}

// Rebuild is a processor's next version folded beside the engine that runs the current one.
// Build it with [NewRebuild], fold with [Rebuild.CatchUp] while the running engine works, and
// make it the processor's with [Rebuild.Switch]; then build the next version's engine with
// [NewEngine] (it loads the switched checkpoint). All its methods are safe for concurrent use.
type Rebuild[S any] struct {
	fold *Engine[S] // the next version's reduce path: never its chain, never ProcessEvent
	side string
	cps  CheckpointStorage

	work sync.Mutex // one fold or switch at a time

	mu       sync.Mutex
	state    S
	cursor   int64
	head     int64 // the highest offset the fold has seen the log reach
	switched bool
}

// NewRebuild reads the side row of next's version and returns the rebuild, resumed from that row
// (a new owner after a lease move goes on where the old one committed), or from the contract's
// initial state at offset 0 when there is none. When the processor's own row already holds
// next's version, the switch was written: the rebuild reports Switched and folds nothing.
//
// cfg is the next version's engine configuration: the same Stream, Checkpoints (fenced by the
// same lease as the running engine's), MayWork and Reporter; the options of ProcessEvent are not
// used.
func NewRebuild[S any](next Processor[S], cfg EngineConfig) (*Rebuild[S], error) {
	if next == nil || next.Contract() == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidContract, nil, "rebuild: the processor has no contract")
	}
	if cfg.Stream == nil || cfg.Checkpoints == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidContract, nil, "rebuild: Stream and Checkpoints are required")
	}
	cfg = cfg.withDefaults()
	c := next.Contract()
	e := &Engine[S]{p: next, c: c, stream: cfg.Stream, cps: cfg.Checkpoints, clock: cfg.Clock, mayWork: cfg.MayWork, cpFenced: cfg.CheckpointsFenced,
		rep: cfg.Reporter, log: cfg.Logger, consumes: c.Consumes(), emits: c.Emits(), waiters: map[*waiter]struct{}{},
		claimTail: closedChan(), changed: make(chan struct{}),
		retry: writeRetry{clock: cfg.Clock, limit: cfg.WriteRetry, log: cfg.Logger, slug: c.Slug()}}
	e.closing, e.stopClosing = context.WithCancel(context.Background())
	r := &Rebuild[S]{fold: e, side: RebuildRow(c.Slug(), c.Version()), cps: cfg.Checkpoints, state: c.InitialState()}
	main, ok, err := r.cps.ReadCheckpoint(context.Background(), c.Slug())
	if err != nil {
		return nil, fmt.Errorf("rebuild %q: %w", c.Slug(), err)
	}
	if ok && main.ReducerVersion == c.Version() {
		r.switched, r.cursor, r.head = true, main.ReducedThroughOffset, main.ReducedThroughOffset
		return r, nil
	}
	cp, ok, err := r.cps.ReadCheckpoint(context.Background(), r.side)
	if err != nil {
		return nil, fmt.Errorf("rebuild %q: %w", c.Slug(), err)
	}
	if ok && cp.ReducerVersion == c.Version() {
		if cp.State != nil {
			var st S
			if err := rawjson.UnmarshalExact(cp.State, &st); err != nil {
				return nil, fmt.Errorf("rebuild %q: decode the side row: %w", c.Slug(), err)
			}
			r.state = st
		}
		r.cursor, r.head = cp.ReducedThroughOffset, cp.ReducedThroughOffset
	}
	return r, nil
}

// Version returns the version being rebuilt.
func (r *Rebuild[S]) Version() string { return r.fold.c.Version() }

// Status reports the rebuilt version, the offset it has folded through and how far that is behind
// the head of the log the fold last saw (lag, in offsets), and whether the switch was written. It
// neither reads nor waits.
func (r *Rebuild[S]) Status() foldtype.ProcessorRebuild {
	r.mu.Lock()
	defer r.mu.Unlock()
	return foldtype.ProcessorRebuild{Version: r.fold.c.Version(), Offset: r.cursor, Lag: max(0, r.head-r.cursor), Switched: r.switched}
}

// Switched reports whether the switch was written: the processor's row holds this version.
func (r *Rebuild[S]) Switched() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.switched
}

// Snapshot returns the rebuilt state once the switch was written; before, it fails with
// CATCHING_UP and the offset the fold has reached (a read of the next version waits for no
// switch: the running version answers meanwhile).
func (r *Rebuild[S]) Snapshot() (Snapshot[S], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.switched {
		return Snapshot[S]{}, rebuildCatchingUp(r.fold.c.Slug(), r.fold.c.Version(), r.cursor)
	}
	return Snapshot[S]{Offset: r.cursor, State: r.state}, nil
}

// rebuildCatchingUp is the CATCHING_UP of a read of a version still being rebuilt.
func rebuildCatchingUp(slug, version string, offset int64) *Error {
	return foldtype.NewError(foldtype.CodeCatchingUp, map[string]any{"slug": slug, "version": version, "offset": offset},
		"processor %s version %s is being rebuilt beside the running version (folded through offset %d); read the running version until the switch",
		quoteJSON(slug), quoteJSON(version), offset)
}

// CatchUp folds the log from the rebuild's offset to its head with Reduce only (no ProcessEvent,
// nothing emitted), writing the side row after every page, so a crash or a lease move loses at
// most one page of folding. It writes nothing else. After the switch it does nothing.
func (r *Rebuild[S]) CatchUp(ctx context.Context) error {
	r.work.Lock()
	defer r.work.Unlock()
	for {
		r.mu.Lock()
		state, cursor, done := r.state, r.cursor, r.switched
		r.mu.Unlock()
		if done {
			return nil
		}
		page, err := r.fold.stream.Read(ctx, cursor, EnginePageSize)
		if err != nil {
			return err
		}
		if page.ScannedThroughOffset <= cursor {
			r.sawHead(page.ScannedThroughOffset)
			return nil
		}
		through := page.ScannedThroughOffset
		state = r.foldPage(page.Events, state, cursor, through)
		if err := r.fold.checkMayWork(ctx); err != nil {
			return err
		}
		b, err := marshalJSON(state)
		if err != nil {
			return fmt.Errorf("rebuild %q: marshal state: %w", r.fold.c.Slug(), err)
		}
		if err := r.cps.WriteCheckpoint(ctx, r.side, Checkpoint{ReducerVersion: r.fold.c.Version(), ReducedThroughOffset: through, State: b}, true); err != nil {
			return err
		}
		r.mu.Lock()
		r.state, r.cursor = state, through
		r.mu.Unlock()
		r.sawHead(through)
		if page.AtHead {
			return nil
		}
	}
}

func (r *Rebuild[S]) sawHead(off int64) {
	r.mu.Lock()
	r.head = max(r.head, off)
	r.mu.Unlock()
}

// foldPage reduces the events of a page that the processor consumes, in (after, through].
func (r *Rebuild[S]) foldPage(events []Event, state S, after, through int64) S {
	for _, ev := range events {
		if ev.Ephemeral || ev.Offset <= after || ev.Offset > through || !reducesEvent(r.fold.consumes, ev) {
			continue
		}
		if next, ch, _, ok := r.fold.normalizeAndReduce(&ev, state); ok && ch {
			state = next
		}
	}
	return state
}

// foldTo folds the log from the rebuild's offset through target into a state it returns, without
// writing or adopting it.
func (r *Rebuild[S]) foldTo(ctx context.Context, target int64) (S, error) {
	r.mu.Lock()
	state, pos := r.state, r.cursor
	r.mu.Unlock()
	for pos < target {
		page, err := r.fold.stream.Read(ctx, pos, EnginePageSize)
		if err != nil {
			return state, err
		}
		through := min(page.ScannedThroughOffset, target)
		state = r.foldPage(page.Events, state, pos, through)
		if page.ScannedThroughOffset <= pos {
			break
		}
		pos = through
	}
	return state, nil
}

// Switch makes the rebuilt version the processor's (docs/operations.md#rebuild-beside-the-running-version).
// It first catches up with the log (CatchUp), then runs as one unit of running's serial chain, so
// no event is processed meanwhile: at the running engine's cursor C it folds the events through
// C and, in one write, replaces the processor's checkpoint row with the rebuilt state at C and
// deletes the side row. The running engine then stops taking work (as [Engine.StopTakingWork]):
// the events after C are the next version's, whose engine [NewEngine] builds from that row.
// Switch returns C.
//
// The running version ran the effects of the events through C and the next version runs those
// after it, so none runs twice and none is skipped. A crash before the write leaves the current
// version running and the side row to resume from; after it, the next version runs from C.
//
// running must be an [*Engine] of the same processor slug (CONFLICT otherwise). When it is behind
// the rebuild (its cursor before the rebuild's offset), it catches up first within the unit;
// if it cannot (its ProcessEvent fails), Switch fails with CONFLICT and changes nothing.
func (r *Rebuild[S]) Switch(ctx context.Context, running foldtype.Runner) (int64, error) {
	if err := r.CatchUp(ctx); err != nil {
		return 0, err
	}
	r.work.Lock()
	defer r.work.Unlock()
	slug := r.fold.c.Slug()
	h, ok := running.(handOverer)
	if !ok || running.Slug() != slug {
		return 0, foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": slug},
			"rebuild of %s: the running processor is not an engine of the same slug", quoteJSON(slug))
	}
	if r.Switched() {
		return r.Status().Offset, nil
	}
	var at int64
	err := h.handOver(ctx, func(ctx context.Context, c int64) error {
		r.mu.Lock()
		behind := c < r.cursor
		rc := r.cursor
		r.mu.Unlock()
		if behind {
			return &runningBehindError{foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": slug, "offset": c, "rebuilt": rc},
				"rebuild of %s: the running version has processed through offset %d only, the rebuild folded through %d; switch once it caught up",
				quoteJSON(slug), c, rc)}
		}
		state, err := r.foldTo(ctx, c)
		if err != nil {
			return err
		}
		b, err := marshalJSON(state)
		if err != nil {
			return fmt.Errorf("rebuild %q: marshal state: %w", slug, err)
		}
		if err := r.fold.checkMayWork(ctx); err != nil {
			return err
		}
		cp := Checkpoint{ReducerVersion: r.fold.c.Version(), ReducedThroughOffset: c, State: b}
		if sw, ok := r.cps.(CheckpointSwitcher); ok {
			err = sw.SwitchCheckpoint(ctx, slug, cp, r.side)
		} else {
			err = r.cps.WriteCheckpoint(ctx, slug, cp, true)
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.state, r.cursor, r.head, r.switched = state, c, max(r.head, c), true
		r.mu.Unlock()
		at = c
		return nil
	})
	return at, err
}

// handOverer is the running engine's side of a switch: *Engine of any state type.
type handOverer interface {
	handOver(ctx context.Context, write func(ctx context.Context, cursor int64) error) error
}

// handOver runs write as one unit of the serial chain, at the chain's cursor after a pending
// re-reduce and, when write refuses because the engine is behind, after one catch-up from the
// log. Once write succeeded the engine stops taking work: the events after the cursor are the
// next version's.
func (e *Engine[S]) handOver(ctx context.Context, write func(ctx context.Context, cursor int64) error) error {
	return await(ctx, e.enqueue(ctx, func(ctx context.Context) error {
		if e.stopping.Load() {
			return e.closedError()
		}
		if err := e.rereduceIfStale(ctx); err != nil {
			return err
		}
		err := write(ctx, e.chainCursor())
		if _, behind := errors.AsType[*runningBehindError](err); behind {
			// Behind the rebuild: catch up within the unit (effects included: this is the
			// chain), then switch at the new cursor.
			if cerr := e.runCatchUp(ctx); cerr != nil {
				return cerr
			}
			err = write(ctx, e.chainCursor())
		}
		if err != nil {
			return err
		}
		e.StopTakingWork()
		return nil
	}))
}

// runningBehindError is a switch's refusal while the running engine is behind the rebuild; it
// unwraps to the CONFLICT its caller sees.
type runningBehindError struct{ err *Error }

func (e *runningBehindError) Error() string { return e.err.Error() }
func (e *runningBehindError) Unwrap() error { return e.err }
