package host

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// Register builds an engine for processor p over the stream at path — the store's event view, its
// checkpoints in the store's own database scoped by path, FedByPushes — and hosts it: it wakes the
// stream, subscribes the engine and starts its catch-up in the background (reads wait for it
// within Config.MaxWait), and revives at once any claim a previous incarnation left for it. It
// returns the engine, which the caller may also use directly.
//
// On a database other nodes share, the processor runs on one node at a time, under a lease
// (docs/postgres.md#processors-and-leases): when another node runs it, the engine returned is
// not hosted here and every write through it fails with LEASE_LOST; this node takes the
// processor over when that node goes away. The host's read methods answer on every node.
//
// The engine stays open while the host runs. If the stream is deleted, the host replaces it with a
// fresh engine (the contract's initial state at offset 0) for the stream created next at path; the
// engine returned here is then closed, so prefer the host's methods to holding it.
func Register[S any](ctx context.Context, h *Host, path string, p foldstream.Processor[S], opts ...RegisterOption) (*foldstream.Engine[S], error) {
	pat, err := exactPattern(path)
	if err != nil {
		return nil, err
	}
	reg := newRegistration(h, pat, p, opts)
	r, err := h.register(ctx, reg)
	if err != nil {
		return nil, err
	}
	if r == nil {
		// Another node runs it: an engine under no lease, whose every write fails LEASE_LOST.
		if r, err = reg.build(path, preread{}, driver.Lease{}); err != nil {
			return nil, err
		}
	}
	return r.(*foldstream.Engine[S]), nil
}

// RegisterPattern runs processor p on every stream whose path matches pattern (see [Pattern] for
// the syntax: "/carts/*" is one segment, "/tenants/acme/**" any depth below): one engine per
// stream, each with its own checkpoint, exactly as [Register] would run it on that path.
//
// Streams that exist now and are behind their checkpoint are caught up in the background; a
// stream created later gets its engine from its first commit, with no call needed. Engines open
// on demand — a commit, a read through the host, or a due claim — and close when idle for
// Config.IdleTimeout or when Config.MaxOpenEngines needs room (least recently used first); a closed
// engine reopens from its checkpoint, so its effects never run twice. Claims a previous
// incarnation left for p on matching streams are revived at once.
//
// p is shared by the engines of every matching stream, which call its hooks concurrently: keep
// per-stream data in the state, not in p. A slug may run under one registration per path:
// registering p's slug again on a pattern or path that overlaps fails.
func RegisterPattern[S any](ctx context.Context, h *Host, pattern string, p foldstream.Processor[S], opts ...RegisterOption) error {
	pat, err := ParsePattern(pattern)
	if err != nil {
		return err
	}
	if pat.exact {
		return foldtype.NewError(foldtype.CodeBadRequest, map[string]any{"pattern": pattern},
			"host: pattern %q has no wildcard: register it with Register", pattern)
	}
	_, err = h.register(ctx, newRegistration(h, pat, p, opts))
	return err
}

// RegisterOption adjusts one registration ([Register], [RegisterPattern]).
type RegisterOption func(*registerOptions)

type registerOptions struct {
	refuseInvalid bool
	policy        FailurePolicy
}

// RefuseInvalidEvents makes the store refuse, at append time, an event on a stream this
// registration covers whose payload breaks the processor's schema for its type (code
// INVALID_EVENT, 400 over HTTP, with the schema error), so bad data never lands
// (docs/store.md#refusing-invalid-events). Without it such an event is stored and the processor
// skips it (counted in its status).
func RefuseInvalidEvents() RegisterOption {
	return func(o *registerOptions) { o.refuseInvalid = true }
}

func newRegistration[S any](h *Host, pat Pattern, p foldstream.Processor[S], opts []RegisterOption) *registration {
	c := p.Contract()
	reg := &registration{pattern: pat}
	var o registerOptions
	for _, opt := range opts {
		opt(&o)
	}
	reg.policy = o.policy
	if c != nil {
		reg.slug, reg.version, reg.consumes = c.Slug(), c.Version(), c.Consumes()
		if b, err := json.Marshal(c.InitialState()); err == nil {
			reg.initial = b
		}
		if o.refuseInvalid {
			consumes := c.Consumes()
			reg.validate = func(ev foldtype.Event) error {
				if !foldtype.ConsumesEvent(consumes, ev) {
					return nil
				}
				_, _, err := c.Normalize(ev)
				return err
			}
		}
	}
	reg.project = func(state json.RawMessage) (json.RawMessage, error) {
		var st S
		if len(state) > 0 {
			if err := json.Unmarshal(state, &st); err != nil {
				return nil, err
			}
		} else if c != nil {
			st = c.InitialState()
		}
		v, err := p.ProjectLiveState(st)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
	reg.build = func(path string, pre preread, l driver.Lease) (foldtype.Runner, error) {
		cps, err := h.checkpointsOf(path, pre.info)
		read := pre.rows
		if err != nil {
			return nil, err
		}
		// The engine's checkpoint and its work-started marker, read together (or with the
		// stream): building the engine reads the database at most once
		// (docs/store.md#engines-of-a-pattern).
		if read == nil {
			if read, err = cps.ReadCheckpoints(h.ctx, engineRows(reg.slug)...); err != nil {
				return nil, err
			}
		}
		if n := reg.nextFor(read); n != nil {
			// Switched to the next version (host/rebuild.go): its engine runs from this row.
			return n.reg.build(path, preread{info: pre.info, rows: read, first: pre.first}, l)
		}
		rows := preloaded(read, engineRows(reg.slug))
		defer rows.forgetAll()
		key := procKey{path, reg.slug}
		es := h.store.Events().Stream(path).ForProcessor(reg.slug)
		return foldstream.NewEngine(p, foldstream.EngineConfig{
			Stream:      &fencedStream{inner: es, fenced: es.Fenced(leaseKey(key), l.Generation), ls: h.leases, key: key, generation: l.Generation, first: pre.first},
			Checkpoints: preloadedCheckpoints{cps.Fenced(leaseKey(key), l.Generation), rows},
			FedByPushes: true,
			Clock:       h.clock,
			Reporter:    h.cfg.Reporter,
			Logger:      h.log,
			// The work-started marker lives beside the checkpoint (docs/engine.md#work-that-keeps-dying).
			KeyValue:       foldstream.CheckpointKeyValue(preloadedCheckpoints{cps, rows}, reg.slug),
			CodeID:         h.cfg.CodeID,
			LoopLimit:      h.cfg.LoopLimit,
			WriteRetry:     h.cfg.WriteRetry,
			TracerProvider: h.cfg.TracerProvider,
			// Nothing that can start an effect runs once the lease's local deadline passed, until
			// a renewal confirmed the lease (docs/reliability.md#a-node-that-freezes).
			MayWork: func(ctx context.Context) error { return h.leases.mayWork(ctx, key, l.Generation) },
			// The checkpoints (above) and the emitted events (fencedStream) are fenced by the
			// lease's generation in the database: what ran is recorded unless the lease moved on.
			CheckpointsFenced: true,
			// Counted per slug in the host, beyond this engine's life (metrics.go).
			Metrics: h.countersFor(reg.slug),
		})
	}
	return reg
}

// checkpoints returns the checkpoint storage of the processors on path.
func (h *Host) checkpoints(path string) (*stream.Checkpoints, error) {
	return h.store.Events().Checkpoints(h.ctx, path)
}

// checkpointsOf is checkpoints for the stream info describes, as the caller just read it: bound
// to that stream with no lookup (the zero info: looked up by path).
func (h *Host) checkpointsOf(path string, info stream.StreamInfo) (*stream.Checkpoints, error) {
	if info.ID() == 0 || info.Path != path {
		return h.checkpoints(path)
	}
	return h.store.Events().CheckpointsOf(info)
}

// Add hosts a runner the caller built on the stream at path. The runner must run against the
// store's event view of path with FedByPushes (Register builds such an engine). Add wakes the stream
// (its wake record for this incarnation), subscribes the runner to the stream's commits filtered by
// its consumes, starts its catch-up from its checkpoint in the background, and brings forward to
// now the claims a previous incarnation left for it, so the alarm loop revives that work at once.
//
// The host cannot rebuild a runner it did not build: if the stream is deleted, the runner is
// removed (Register and RegisterPattern keep their registrations instead).
func (h *Host) Add(ctx context.Context, path string, r foldtype.Runner) error {
	pat, err := exactPattern(path)
	if err != nil {
		return err
	}
	_, err = h.register(ctx, &registration{pattern: pat, slug: r.Slug(), added: r})
	return err
}

// register records reg and, for an exact path, opens its engine; for a pattern it starts the
// background scan of existing streams. It returns the exact path's runner.
func (h *Host) register(ctx context.Context, reg *registration) (foldtype.Runner, error) {
	what := fmt.Sprintf("host: register %q on %q", reg.slug, reg.pattern)
	// Read before any engine of this registration runs: what is there now was left by a previous
	// incarnation of the host.
	claims, err := h.leftoverClaims(ctx, reg.pattern, reg.slug)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return nil, ErrShutdown
	}
	if other := h.overlapLocked(reg); other != nil {
		h.mu.Unlock()
		return nil, foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": reg.slug, "pattern": reg.pattern.String()},
			"host: processor %q is already registered on %q, which overlaps %q", reg.slug, other.pattern, reg.pattern)
	}
	if reg.validate != nil {
		h.addRefusingLocked(reg)
	}
	if reg.build != nil {
		h.countersFor(reg.slug) // its metrics exist from its registration on, engine open or not (metrics.go)
	}
	if !reg.pinned() {
		h.patterns = append(h.patterns, reg)
		h.hasPatterns.Store(true)
		h.wg.Add(1)
		h.mu.Unlock()
		go func() {
			defer h.wg.Done()
			h.scan(reg)
		}()
		if err := h.reviveNow(ctx, claims); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return nil, nil
	}
	key := procKey{reg.pattern.text, reg.slug}
	h.exact[key] = reg
	sl := newSlot(key, reg)
	h.slots[key] = sl
	h.mu.Unlock()
	sl.force = true
	h.open(sl, openForRegister, false)
	if err := sl.openErr; isElsewhere(err) {
		return nil, nil // the registration stays: the lease loop takes it over when free
	} else if err != nil {
		h.mu.Lock()
		if h.exact[key] == reg {
			delete(h.exact, key)
		}
		h.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := h.reviveNow(ctx, claims); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return sl.runner, nil
}

// overlapLocked returns a registration of reg's slug that covers a path reg covers too. h.mu held.
func (h *Host) overlapLocked(reg *registration) *registration {
	if other := h.exact[procKey{reg.pattern.text, reg.slug}]; other != nil {
		return other
	}
	for _, other := range h.exact {
		if other.slug == reg.slug && !reg.pattern.exact && reg.pattern.Match(other.pattern.text) {
			return other
		}
	}
	for _, other := range h.patterns {
		if other.slug != reg.slug {
			continue
		}
		if reg.pattern.exact && other.pattern.Match(reg.pattern.text) || !reg.pattern.exact && other.pattern.overlaps(reg.pattern) {
			return other
		}
	}
	return nil
}

// Remove stops hosting the processor registered with Register or Add on the exact path: its
// subscription is drained (until ctx ends) and its engine closed (background attempts cancelled
// and waited for). Its checkpoint and claims stay.
func (h *Host) Remove(ctx context.Context, path, slug string) error {
	key := procKey{path, slug}
	h.mu.Lock()
	reg := h.exact[key]
	sl := h.slots[key]
	if reg == nil || sl == nil || sl.state == slotOpening {
		// Absent, or its Add is still starting: nothing to remove yet.
		h.mu.Unlock()
		return notRegistered(path, slug)
	}
	delete(h.exact, key)
	delete(h.slots, key)
	state := sl.state
	sl.state = slotClosing
	h.mu.Unlock()
	if state != slotOpen {
		return nil
	}
	err := sl.sub.Drain(ctx)
	settled, cerr := settleAndClose(ctx, sl.runner, h.cfg.LeaseTTL, true)
	if err == nil {
		err = cerr
	}
	h.releaseAfterClose(sl, settled, false)
	return err
}

// Runner returns the runner of processor slug on the stream at path, opening it when it runs under
// a pattern and is closed. A runner of a pattern registration may be closed again at any time
// afterwards (idle or the cap); use the host's methods to read it.
func (h *Host) Runner(path, slug string) (foldtype.Runner, bool) {
	sl, err := h.acquire(context.Background(), path, slug, openForRead)
	if err != nil {
		return nil, false
	}
	defer h.release(sl)
	return sl.runner, true
}

// addRefusingLocked adds reg to the registrations whose schemas the store checks at append time,
// installing the host's check on first use. h.mu held.
func (h *Host) addRefusingLocked(reg *registration) {
	var next []*registration
	if cur := h.refusing.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, reg)
	h.refusing.Store(&next)
	if h.removeCheck == nil {
		h.removeCheck = h.store.Events().SetAppendCheck(h.checkAppend)
	}
}

// checkAppend is the store's append check: an event that breaks the payload schema of a
// processor registered with RefuseInvalidEvents on path refuses the append. The refusal lists
// every violation of the batch (up to foldtype.MaxViolations), each with the event's index and
// the value's JSON pointer, so a writer fixes all of them at once.
func (h *Host) checkAppend(path string, events []foldtype.Event) error {
	regs := h.refusing.Load()
	if regs == nil {
		return nil
	}
	var (
		violations []foldtype.Violation
		total      int
		first      string // the first violation's processor and event type
		slug, typ  string
	)
	for _, reg := range *regs {
		if !reg.pattern.Match(path) {
			continue
		}
		for i, ev := range events {
			err := reg.validate(ev)
			if err == nil {
				continue
			}
			vs := foldstream.SchemaViolations(err)
			if total == 0 {
				first = fmt.Sprintf("processor %q (event type %q)", reg.slug, ev.Type)
				slug, typ = reg.slug, ev.Type
			}
			total += len(vs)
			for _, v := range vs {
				if len(violations) < foldtype.MaxViolations {
					v.Index = i
					violations = append(violations, v)
				}
			}
		}
	}
	if total == 0 {
		return nil
	}
	v := violations[0]
	msg := fmt.Sprintf("%d schema violation(s) in the batch, the first in the payload schema of %s at %s: %s "+
		"(fix the payloads; nothing was written)", total, first, v.Pointer, v.Message)
	if total > len(violations) {
		msg += fmt.Sprintf("; the first %d are listed", len(violations))
	}
	return &foldtype.Error{Code: foldtype.CodeInvalidEvent, Message: msg, Retryable: true,
		Data: map[string]any{"path": path, "slug": slug, "type": typ, foldtype.DataViolations: violations, foldtype.DataViolationsTotal: total}}
}
