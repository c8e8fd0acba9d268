package host

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// statusReporter is implemented by runners that report their own status (*foldtype.Engine does).
type statusReporter interface {
	Status() foldtype.ProcessorStatus
}

// ProcessorsOn returns the status of every processor the host runs on the stream at path, sorted
// by slug: the exact-path registrations on it and, when the stream exists, the pattern
// registrations covering it — open or closed, here or on another node (while the database does
// not answer, those covering it that this node runs or holds the lease of). It neither waits nor opens
// an engine. Each status has one State (docs/postgres.md#processors-and-leases): running, catching
// up, failing or parked on the node that holds its lease (its owner, with the lease's generation),
// as the owner reports it here or, from another node, as the owner stored it with its last lease
// renewal; idle when no node runs it because it has nothing to do; unowned when its lease waits for
// a node to take it over. The offset is the owner's engine's, or the furthest of the owner's
// report and the stored checkpoint. It returns an empty slice when the host runs none there. While
// the host shuts down it reports only the processors whose lease this node still holds (their
// engines finishing the event in progress, whose effects run under that lease), and none once they
// are all handed over.
func (h *Host) ProcessorsOn(ctx context.Context, path string) []foldtype.ProcessorStatus {
	type entry struct {
		reg   *registration
		sl    *slot
		exact bool
	}
	h.mu.Lock()
	// While the host shuts down, an engine finishing its event in progress still runs that
	// event's effects under its lease: the processors this node still holds the lease of are
	// reported (as this node's, with the generation) until they are handed over.
	here := func(key procKey) bool {
		if !h.shutdown {
			return true
		}
		_, held := h.leases.heldLease(key)
		return held
	}
	var entries []entry
	for key, reg := range h.exact {
		if key.path == path && here(key) {
			entries = append(entries, entry{reg, h.slots[key], true})
		}
	}
	for _, reg := range h.patterns {
		if key := (procKey{path, reg.slug}); reg.pattern.Match(path) && h.exact[key] == nil && here(key) {
			entries = append(entries, entry{reg, h.slots[key], false})
		}
	}
	out := make([]foldtype.ProcessorStatus, 0, len(entries))
	local := make([]bool, 0, len(entries)) // the status is this node's engine's
	patterns := false
	for _, e := range entries {
		st := foldtype.ProcessorStatus{Slug: e.reg.slug, Version: e.reg.version, Pattern: e.reg.pattern.String()}
		mine := false
		if e.sl != nil && (e.sl.state == slotOpen || e.sl.state == slotParked) {
			mine = true
			ls := h.localStatusLocked(e.sl)
			if e.sl.state == slotOpen {
				if sr, ok := e.sl.runner.(statusReporter); ok {
					st = sr.Status()
					st.Pattern = e.reg.pattern.String()
				}
				if st.WaitingForStore == nil {
					st.WaitingForStore = catchUpWaitLocked(e.sl) // host/catchupretry.go
				}
				st.Open = true
			}
			st.State, st.Offset, st.Failing, st.Parked, st.Paused = ls.State, max(st.Offset, ls.Offset), ls.Failing, ls.Parked, ls.Paused
		}
		if !e.exact {
			patterns = true
		}
		out = append(out, st)
		local = append(local, mine)
	}
	h.mu.Unlock()
	if patterns {
		if _, err := h.store.Events().HeadStream(ctx, path); err != nil {
			// Patterns cover existing streams only: keep the exact registrations. When the
			// database does not answer, whether the stream exists is not known, and what this
			// node runs or holds the lease of is reported still (its owner and generation are
			// this node's to tell, and effects run under them meanwhile).
			gone := errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone)
			var kept []foldtype.ProcessorStatus
			var keptLocal []bool
			for i, e := range entries {
				_, held := h.leases.heldLease(procKey{path, e.reg.slug})
				if e.exact || (!gone && (local[i] || held)) {
					kept, keptLocal = append(kept, out[i]), append(keptLocal, local[i])
				}
			}
			out, local = kept, keptLocal
			if out == nil {
				out = []foldtype.ProcessorStatus{}
			}
		}
	}
	// The leases, as stored now (one read), of the processors this node does not run.
	leases := map[string]driver.Lease{}
	var keys []string
	for i := range out {
		k := procKey{path, out[i].Slug}
		if l, ok := h.leases.heldLease(k); ok {
			leases[leaseKey(k)] = l
		} else {
			keys = append(keys, leaseKey(k))
		}
	}
	if len(keys) > 0 {
		if ls, err := h.leases.drv.Leases(ctx, driver.LeaseQuery{Keys: keys}); err == nil {
			for _, l := range ls {
				leases[l.Key] = l
			}
		}
	}
	var cps *stream.Checkpoints
	var rows map[string]driver.ProcessorStateRow
	for i := range out {
		st := &out[i]
		l, ok := leases[leaseKey(procKey{path, st.Slug})]
		if ok && l.Live {
			st.Owner, st.Generation, st.Local = l.Holder, l.Generation, l.Holder == h.leases.node
		}
		if st.Open {
			continue
		}
		switch {
		case local[i]: // parked here
		case ok && l.Live:
			// Another node runs it (or this one is opening it): the state its owner stored.
			var rep leaseStatus
			if l.Status == "" || json.Unmarshal([]byte(l.Status), &rep) != nil || rep.State == "" {
				rep = leaseStatus{State: foldtype.StateCatchingUp} // just taken: no report yet
			}
			st.State, st.Offset, st.Failing, st.Parked, st.Paused = rep.State, rep.Offset, rep.Failing, rep.Parked, rep.Paused
		case ok && !l.Idle:
			st.State = foldtype.StateUnowned
		default:
			st.State = foldtype.StateIdle
		}
		if !(ok && l.Live) {
			// No node runs it: its stored row says whether it is paused, or was failing when its
			// owner died (host/pause.go).
			if rows == nil {
				rows, _ = h.stateRowsOn(ctx, path)
			}
			if r, found := rows[st.Slug]; found {
				st.Failing = failureOfRow(r)
				if r.State == rowPaused {
					st.State, st.Paused = foldtype.StatePaused, (&pauseRecord{row: r}).status()
				} else {
					st.State = foldtype.StateFailing
				}
			}
		}
		if cps == nil {
			c, err := h.checkpoints(path)
			if err != nil {
				continue
			}
			cps = c
		}
		if cp, ok, err := cps.ReadCheckpoint(ctx, st.Slug); err == nil && ok {
			st.Offset = max(st.Offset, cp.ReducedThroughOffset)
		}
	}
	h.addRebuilds(ctx, path, out) // a next version rebuilt beside the running one (host/rebuild.go)
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}

// leaseStatus is what the owner of a processor's lease stores with it at each renewal
// (driver.Lease.Status), so every node shows the same state.
type leaseStatus struct {
	State   string                     `json:"state"`
	Offset  int64                      `json:"offset,omitempty"`
	Failing *foldtype.ProcessorFailure `json:"failing,omitempty"`
	Parked  *foldtype.ProcessorError   `json:"parked,omitempty"`
	Paused  *foldtype.ProcessorPause   `json:"paused,omitempty"`
}

// localStatusLocked is the state of sl on this node. h.mu held.
func (h *Host) localStatusLocked(sl *slot) leaseStatus {
	switch sl.state {
	case slotParked:
		if p := sl.paused; p != nil {
			return leaseStatus{State: foldtype.StatePaused, Paused: p.status(), Failing: failureOfRow(p.row)}
		}
		return leaseStatus{State: foldtype.StateParked, Parked: parkedStatus(sl.parked)}
	case slotOpen:
		st := leaseStatus{State: foldtype.StateRunning, Offset: sl.runner.ReducedThroughOffset()}
		select {
		case <-sl.caughtUp:
		default:
			st.State = foldtype.StateCatchingUp
		}
		if f := sl.failing; f != nil && !healedLocked(sl) {
			cp := *f
			st.State, st.Failing = foldtype.StateFailing, &cp
		}
		return st
	case slotClosing:
		// Finishing its work before it closes (idle, handed over, or the host stopping).
		return leaseStatus{State: foldtype.StateRunning, Offset: sl.runner.ReducedThroughOffset()}
	}
	return leaseStatus{State: foldtype.StateCatchingUp}
}

// leaseStatuses returns, as JSON, the state of every processor this node has an engine for (the
// status its lease renewals store).
func (h *Host) leaseStatuses() map[procKey]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[procKey]string, len(h.slots))
	for k, sl := range h.slots {
		if b, err := json.Marshal(h.localStatusLocked(sl)); err == nil {
			out[k] = string(b)
		}
	}
	return out
}

// NodeID returns the name this node's leases carry (Config.NodeID or the random default).
func (h *Host) NodeID() string { return h.leases.node }

// parkedStatus is a parked error as a status reports it: the cause's code and message.
func parkedStatus(err error) *foldtype.ProcessorError {
	var pe *foldtype.Error
	if !errors.As(err, &pe) {
		return &foldtype.ProcessorError{Code: foldtype.CodeProcessorParked, Message: err.Error()}
	}
	st := &foldtype.ProcessorError{Code: foldtype.CodeProcessorParked, Message: pe.Message}
	if code := foldtype.CodeOf(pe.Err); code != "" {
		st.Code = code
	}
	if pe.Err != nil {
		st.Message = pe.Err.Error()
	}
	return st
}
