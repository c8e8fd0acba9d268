package host

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// A rebuild beside the running version (docs/operations.md#rebuild-beside-the-running-version),
// as the host runs it. The rules, kept in this file:
//
//   - A registration may name its next version (RegisterNextVersion). The operator's rebuild
//     verb starts, on the node that holds the processor's lease, a foldstream.Rebuild of it,
//     fenced by that lease; it folds the log into its side row while the running engine works,
//     then switches at the running engine's cursor, and the slot's engine is replaced by the next
//     version's, built from the switched row, under the same lease and subscription rules as an
//     opening.
//   - Which version an engine runs is decided by the processor's checkpoint row: a row of the
//     next version builds the next version's engine (on every node, after a restart or a lease
//     move), so no node ever runs the old version after the switch.
//   - A node that opens a processor whose side row exists resumes its rebuild from that row: a
//     lease move does not lose the folding done.

// nextVersion is a registration's next version.
type nextVersion struct {
	version string
	// reg is the next version's registration: its build makes the engine after the switch.
	reg *registration
	// rebuild makes the rebuild of processor's next version on path under lease l.
	rebuild func(path string, l driver.Lease) (rebuilder, error)
}

// rebuilder is a *foldstream.Rebuild of any state type.
type rebuilder interface {
	Switch(ctx context.Context, running foldtype.Runner) (int64, error)
	Status() foldtype.ProcessorRebuild
}

// rebuildRun is one rebuild running on this node.
type rebuildRun struct {
	sl   *slot
	rb   rebuilder
	err  error         // the last failure (h.mu)
	done chan struct{} // closed when it ended (switched or failed)
}

// RegisterNextVersion registers next as the next version of the processor already registered
// (Register or RegisterPattern) under next's slug on pathOrPattern, exactly as that registration
// names it. Both versions' code are in the program: the running version goes on until an operator
// asks for a rebuild (Host.Rebuild, or POST …?op=rebuild), and then the next version is rebuilt
// beside it and switched in (docs/operations.md#rebuild-beside-the-running-version). A processor
// whose checkpoint holds next's version already (switched before a restart, or on another node)
// opens with next at once.
//
// It fails with NOT_REGISTERED when no registration of next's slug is on pathOrPattern, and with
// CONFLICT when next's version is the registered one or a next version is registered already.
// A rebuild of next that an earlier owner of a processor left (its side row) is resumed on this
// node where it runs the processor: a lease move or a restart does not lose the folding done.
func RegisterNextVersion[S any](ctx context.Context, h *Host, pathOrPattern string, next foldstream.Processor[S]) error {
	if next == nil || next.Contract() == nil {
		return foldtype.NewError(foldtype.CodeInvalidContract, nil, "host: the next version has no contract")
	}
	pat, err := ParsePattern(pathOrPattern)
	if err != nil {
		return err
	}
	c := next.Contract()
	nreg := newRegistration(h, pat, next, nil)
	n := &nextVersion{version: c.Version(), reg: nreg}
	n.rebuild = func(path string, l driver.Lease) (rebuilder, error) {
		cps, err := h.checkpoints(path)
		if err != nil {
			return nil, err
		}
		key := procKey{path, c.Slug()}
		es := h.store.Events().Stream(path).ForProcessor(c.Slug())
		return foldstream.NewRebuild(next, foldstream.EngineConfig{
			Stream:      &fencedStream{inner: es, fenced: es.Fenced(leaseKey(key), l.Generation), ls: h.leases, key: key, generation: l.Generation},
			Checkpoints: cps.Fenced(leaseKey(key), l.Generation),
			Clock:       h.clock,
			Reporter:    h.cfg.Reporter,
			Logger:      h.log,
			MayWork:     func(ctx context.Context) error { return h.leases.mayWork(ctx, key, l.Generation) },
			// The checkpoints are fenced by the lease's generation in the database.
			CheckpointsFenced: true,
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var reg *registration
	if pat.exact {
		reg = h.exact[procKey{pat.text, c.Slug()}]
	} else {
		for _, r := range h.patterns {
			if r.slug == c.Slug() && r.pattern.String() == pat.String() {
				reg = r
			}
		}
	}
	if reg == nil || reg.build == nil {
		return foldtype.NewError(foldtype.CodeNotRegistered, map[string]any{"slug": c.Slug(), "pattern": pathOrPattern},
			"host: no processor %q is registered on %q: register its running version first", c.Slug(), pathOrPattern)
	}
	if reg.version == n.version {
		return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": c.Slug(), "version": n.version},
			"host: processor %q runs version %q already: the next version needs another", c.Slug(), n.version)
	}
	if !reg.next.CompareAndSwap(nil, n) {
		return foldtype.NewError(foldtype.CodeConflict, map[string]any{"slug": c.Slug(), "version": reg.next.Load().version},
			"host: processor %q has a next version registered already (%q)", c.Slug(), reg.next.Load().version)
	}
	nreg.policy = reg.policy
	// A rebuild an earlier owner left goes on where the registration's engines are open already
	// (an opening after this point resumes it itself).
	var open []*slot
	for _, sl := range h.slots {
		if sl.reg == reg && sl.state == slotOpen {
			open = append(open, sl)
		}
	}
	if len(open) > 0 && !h.shutdown {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for _, sl := range open {
				h.resumeRebuild(sl)
			}
		}()
	}
	return nil
}

// nextFor returns r's next version when rows (as an opening read them) hold the processor's row
// at that version: the engine to build is the next version's. Nil otherwise.
func (r *registration) nextFor(rows map[string]foldtype.Checkpoint) *nextVersion {
	n := r.next.Load()
	if n == nil {
		return nil
	}
	if cp, ok := rows[r.slug]; ok && cp.ReducerVersion == n.version {
		return n
	}
	return nil
}

// atVersion returns the registration whose engine runs a checkpoint row of version: r itself, or
// its next version's once the processor switched to it; nil for any other version (a re-reduce
// is due).
func (r *registration) atVersion(version string) *registration {
	if r.version == "" || version == r.version {
		return r
	}
	if n := r.next.Load(); n != nil && n.version == version {
		return n.reg
	}
	return nil
}

// noNextVersion is the CONFLICT of a rebuild asked for a processor with no next version.
func noNextVersion(path, slug string) error {
	return foldtype.NewError(foldtype.CodeConflict, map[string]any{"path": path, "slug": slug},
		"host: processor %q on %q has no next version registered: there is nothing to rebuild (the program registers one with RegisterNextVersion)",
		slug, path)
}

// Rebuild starts, or reports, the rebuild of processor slug's next version on path beside the
// running one (docs/operations.md#rebuild-beside-the-running-version): the next version folds
// the log with Reduce only into its own row while the running version answers reads and runs
// every effect; once it has caught up it is switched in at the running version's cursor, and
// the processor runs the next version from there. Rebuild returns at once with where the
// rebuild is; asked again it reports the one running (or the switch done, Switched).
//
// A processor with no next version registered fails with CONFLICT. A processor another node runs
// is asked of that node, as the other verbs are.
func (h *Host) Rebuild(ctx context.Context, path, slug string) (foldtype.ProcessorRebuild, error) {
	key := procKey{path, slug}
	sl, err := h.acquire(ctx, path, slug, openForWork)
	var ee *elsewhereError
	q := url.Values{"op": {"rebuild"}}
	switch {
	case errors.As(err, &ee):
		var res struct{ Rebuild foldtype.ProcessorRebuild }
		err := h.askHolder(ctx, ee.lease, key, q, &res)
		return res.Rebuild, err
	case errors.Is(err, foldtype.ErrNotRegistered):
		var res struct{ Rebuild foldtype.ProcessorRebuild }
		if done, oerr := h.askOwner(ctx, key, q, &res); done || oerr != nil {
			return res.Rebuild, oerr
		}
		return foldtype.ProcessorRebuild{}, err
	case err != nil:
		return foldtype.ProcessorRebuild{}, err
	}
	defer h.release(sl)
	n := sl.reg.next.Load()
	if n == nil {
		return foldtype.ProcessorRebuild{}, noNextVersion(path, slug)
	}
	h.mu.Lock()
	runner := sl.runner
	h.mu.Unlock()
	if sr, ok := runner.(statusReporter); ok && sr.Status().Version == n.version {
		return foldtype.ProcessorRebuild{Version: n.version, Offset: runner.ReducedThroughOffset(), Switched: true}, nil
	}
	run, err := h.startRebuild(sl, n)
	if err != nil {
		return foldtype.ProcessorRebuild{}, err
	}
	return h.rebuildStatus(run), nil
}

// startRebuild starts the rebuild of sl's next version n, or returns the one running.
func (h *Host) startRebuild(sl *slot, n *nextVersion) (*rebuildRun, error) {
	h.mu.Lock()
	if run := h.rebuilds[sl.key]; run != nil && run.sl == sl {
		h.mu.Unlock()
		return run, nil
	}
	lease := sl.lease
	h.mu.Unlock()
	rb, err := n.rebuild(sl.key.path, lease)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if run := h.rebuilds[sl.key]; run != nil && run.sl == sl {
		return run, nil // started meanwhile
	}
	if h.shutdown || h.slots[sl.key] != sl || sl.state != slotOpen {
		return nil, ErrShutdown
	}
	run := &rebuildRun{sl: sl, rb: rb, done: make(chan struct{})}
	h.rebuilds[sl.key] = run
	sl.refs++ // the rebuild's: a pattern's idle sweep leaves the slot open meanwhile
	h.wg.Add(1)
	go h.runRebuild(run, n)
	h.log.Info("host: rebuild started", "path", sl.key.path, "slug", sl.key.slug, "version", n.version,
		"from", rb.Status().Offset)
	return run, nil
}

// rebuildStatus is run's status with its lag behind the running version.
func (h *Host) rebuildStatus(run *rebuildRun) foldtype.ProcessorRebuild {
	st := run.rb.Status()
	h.mu.Lock()
	runner, err := run.sl.runner, run.err
	h.mu.Unlock()
	if !st.Switched && runner != nil {
		st.Lag = max(0, runner.ReducedThroughOffset()-st.Offset)
	}
	if err != nil {
		st.Error = problemOf(err)
	}
	return st
}

// problemOf is err as a status reports it: its code and message (INTERNAL for an uncoded one).
func problemOf(err error) *foldtype.ProcessorError {
	var fe *foldtype.Error
	if errors.As(err, &fe) {
		return &foldtype.ProcessorError{Code: fe.Code, Message: fe.Message}
	}
	return &foldtype.ProcessorError{Code: foldtype.CodeInternal, Message: "the rebuild failed; see the node's log"}
}

// runRebuild folds and switches run, then puts the next version's engine in the slot.
func (h *Host) runRebuild(run *rebuildRun, n *nextVersion) {
	defer h.wg.Done()
	sl := run.sl
	end := func(err error) {
		h.mu.Lock()
		run.err = err
		if err == nil && h.rebuilds[sl.key] == run {
			delete(h.rebuilds, sl.key)
		}
		h.mu.Unlock()
		close(run.done)
		h.release(sl)
	}
	h.mu.Lock()
	runner := sl.runner
	h.mu.Unlock()
	at, err := run.rb.Switch(h.ctx, runner)
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("host: rebuild failed; ask for it again to resume it from its row", "path", sl.key.path, "slug", sl.key.slug,
				"version", n.version, "err", err)
		}
		h.mu.Lock()
		if h.rebuilds[sl.key] == run {
			delete(h.rebuilds, sl.key) // asked again, it starts anew from its row
		}
		h.mu.Unlock()
		end(err)
		return
	}
	h.log.Info("host: rebuild switched", "path", sl.key.path, "slug", sl.key.slug, "version", n.version, "at", at)
	h.switchSlot(sl, runner)
	end(nil)
}

// switchSlot replaces sl, whose engine old stopped taking work at the switch, by a fresh slot that
// opens the next version's engine from the switched row, as the replacement of a re-created
// stream's slot does (recreated): sl is marked stale, so a read holding it goes to the fresh
// slot, which is in the map at once, so reads wait for it rather than answer NOT_REGISTERED. The
// lease stays this node's. When sl is not open any more (closed, paused, its lease lost), old is
// closed by whoever closed it and the next opening builds the next version from the row.
func (h *Host) switchSlot(sl *slot, old foldtype.Runner) {
	h.mu.Lock()
	if h.shutdown || sl.state != slotOpen || h.slots[sl.key] != sl || sl.runner != old {
		h.mu.Unlock()
		return
	}
	sl.stopRetryLocked()
	sl.stale, sl.state = true, slotClosing
	if sl.elem != nil {
		h.lru.Remove(sl.elem)
		sl.elem = nil
	}
	fresh := newSlot(sl.key, sl.reg)
	fresh.force = true
	h.slots[sl.key] = fresh
	sub, closed := sl.sub, sl.closed
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		ctx := context.WithoutCancel(h.ctx)
		sub.Close()
		if _, err := settleAndClose(ctx, old, h.cfg.LeaseTTL, false); err != nil && !errors.Is(err, foldtype.ErrClosed) {
			h.log.Warn("host: closing the switched-from engine failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		}
		close(closed)
		mode := openForWork
		if sl.reg.pinned() {
			mode = openForRegister
		}
		h.open(fresh, mode, false)
		if err := fresh.openErr; err != nil && !errors.Is(err, ErrShutdown) && !isElsewhere(err) {
			h.log.Warn("host: opening the rebuilt version failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
		}
	}()
}

// resumeRebuild resumes, on the node that just opened sl, a rebuild whose side row an earlier
// owner left (a lease move, a restart): it goes on from that row.
func (h *Host) resumeRebuild(sl *slot) {
	n := sl.reg.next.Load()
	if n == nil {
		return
	}
	h.mu.Lock()
	runner := sl.runner
	h.mu.Unlock()
	if sr, ok := runner.(statusReporter); ok && sr.Status().Version == n.version {
		return
	}
	cps, err := h.checkpoints(sl.key.path)
	if err != nil {
		return
	}
	if _, ok, err := cps.ReadCheckpoint(h.ctx, foldstream.RebuildRow(sl.key.slug, n.version)); err != nil || !ok {
		return
	}
	if _, err := h.startRebuild(sl, n); err != nil && !errors.Is(err, ErrShutdown) {
		h.log.Warn("host: resuming a rebuild failed", "path", sl.key.path, "slug", sl.key.slug, "err", err)
	}
}

// addRebuilds sets the NextVersion and Rebuilding of the statuses out (of processors on path)
// whose registration has a next version not switched in: this node's rebuild when it runs one,
// else the side row as stored (one read); a processor whose row holds the next version reports
// that version.
func (h *Host) addRebuilds(ctx context.Context, path string, out []foldtype.ProcessorStatus) {
	for i := range out {
		st := &out[i]
		h.mu.Lock()
		reg := h.registrationFor(path, st.Slug)
		run := h.rebuilds[procKey{path, st.Slug}]
		h.mu.Unlock()
		if reg == nil {
			continue
		}
		n := reg.next.Load()
		if n == nil || st.Version == n.version {
			continue
		}
		st.NextVersion = n.version
		if run != nil {
			rs := h.rebuildStatus(run)
			st.Rebuilding = &rs
			continue
		}
		cps, err := h.checkpoints(path)
		if err != nil {
			continue
		}
		side := foldstream.RebuildRow(st.Slug, n.version)
		rows, err := cps.ReadCheckpoints(ctx, st.Slug, side)
		if err != nil {
			continue
		}
		if cp, ok := rows[st.Slug]; ok && cp.ReducerVersion == n.version {
			st.Version = n.version // switched; this node's view of it was the old registration's
			st.NextVersion = ""
			continue
		}
		if cp, ok := rows[side]; ok {
			st.Rebuilding = &foldtype.ProcessorRebuild{Version: n.version, Offset: cp.ReducedThroughOffset,
				Lag: max(0, st.Offset-cp.ReducedThroughOffset)}
		}
	}
}

// VersionSnapshot answers a read of processor slug on path at version: the running version's
// snapshot (Snapshot) when version is the one it runs; CATCHING_UP, with the offset the rebuild
// has reached, when version is the next version being rebuilt beside it; NOT_REGISTERED for
// any other version.
func (h *Host) VersionSnapshot(ctx context.Context, path, slug, version string) (foldtype.Snapshot[json.RawMessage], error) {
	statuses := h.ProcessorsOn(ctx, path)
	for _, st := range statuses {
		if st.Slug != slug {
			continue
		}
		if st.Version == version {
			snap, err := h.Snapshot(ctx, path, slug)
			return foldtype.Snapshot[json.RawMessage]{Offset: snap.Offset, State: snap.State}, err
		}
		h.mu.Lock()
		reg := h.registrationFor(path, slug)
		h.mu.Unlock()
		if reg == nil {
			break
		}
		if n := reg.next.Load(); n != nil && n.version == version {
			off := int64(0)
			if st.Rebuilding != nil {
				off = st.Rebuilding.Offset
			}
			return foldtype.Snapshot[json.RawMessage]{}, foldtype.NewError(foldtype.CodeCatchingUp,
				map[string]any{"path": path, "slug": slug, "version": version, "offset": off},
				"host: processor %q on %q version %q is not running yet (rebuilt through offset %d): read the running version %q until the switch",
				slug, path, version, off, st.Version)
		}
	}
	return foldtype.Snapshot[json.RawMessage]{}, foldtype.NewError(foldtype.CodeNotRegistered, map[string]any{"path": path, "slug": slug, "version": version},
		"host: no processor %q version %q runs on %q", slug, version, path)
}
