package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/membership"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream/driver"
)

// Leases: every processor the host runs, it runs under a lease (docs/postgres.md#processors-and-leases).
//
// The lease of (path, slug) is a row of the driver's lease table; whoever holds it runs that
// processor's engine, and nobody else does. On a database that other nodes share (PostgreSQL)
// this is what keeps a processor on exactly one node at a time: its checkpoint writes carry the
// lease's generation, checked inside their transaction (LEASE_LOST once another node took over),
// and its appends and claims are refused once the lease ran out by this node's clock. On SQLite
// the driver keeps leases in memory, so the same code costs a map lookup.
//
// Which node holds which lease — the members, rendezvous assignment, the join delay, renewals with
// local deadlines, hand-overs, releases and takeover announcements — is the cluster's membership
// service (internal/membership), one per host. What stays here is what is about processors: the
// lease key of a processor, which processors this node has work for and may take or hand over
// (registrations, slots), stopping an engine whose lease was lost, and the fenced stream an engine
// writes through.

const (
	// DefaultLeaseTTL is how long a lease lasts without renewal: a killed node's processors resume
	// elsewhere within about this long.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultProcessorPrefix is where nodes serve processor routes (the server's default).
	DefaultProcessorPrefix = wire.ProcessorPrefix

	leasePrefix = "processor\x1f"
)

// leaseKey names the lease of a processor on a stream, joined by the unit separator.
func leaseKey(k procKey) string { return leasePrefix + k.path + "\x1f" + k.slug }

func parseLeaseKey(key string) (procKey, bool) {
	rest, ok := strings.CutPrefix(key, leasePrefix)
	if !ok {
		return procKey{}, false
	}
	i := strings.LastIndexByte(rest, '\x1f')
	if i < 0 {
		return procKey{}, false
	}
	return procKey{rest[:i], rest[i+1:]}, true
}

// elsewhereError says that another node holds the lease of a processor (it runs it there).
type elsewhereError struct{ lease driver.Lease }

func (e *elsewhereError) Error() string {
	return fmt.Sprintf("host: processor runs on node %s", e.lease.Holder)
}

// errNotPreferred is an open skipped because another node is preferred for the free lease.
var errNotPreferred = errors.New("host: another node is preferred for this processor")

// leaseSet is the host's side of its membership service: the service's leases by processor, and
// the service's questions about processors answered from the host's registrations and slots (it
// is the service's membership.Work).
type leaseSet struct {
	h    *Host
	svc  *membership.Service
	drv  driver.Driver
	node string
	addr string
	ttl  time.Duration
}

func newNodeID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// startLeases joins the cluster (the node lease) and starts the membership service's loops.
func (h *Host) startLeases(ctx context.Context) error {
	ls := &leaseSet{h: h, drv: h.store.Driver(), node: h.cfg.NodeID, addr: strings.TrimRight(h.cfg.Addr, "/"), ttl: h.cfg.LeaseTTL}
	svc, err := membership.Join(ctx, membership.Config{Driver: ls.drv, Node: ls.node, Addr: ls.addr, TTL: ls.ttl,
		Prefix: leasePrefix, Work: ls, Logger: h.log, Noun: "processor", Label: leaseLabel})
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	ls.svc = svc
	h.leases = ls
	svc.Start(ctx)
	return nil
}

// leaseLabel is the log attributes of a processor's lease key: its path and slug.
func leaseLabel(key string) []any {
	if k, ok := parseLeaseKey(key); ok {
		return []any{"path", k.path, "slug", k.slug}
	}
	return []any{"lease", key}
}

// preferredOf returns the member of nodes preferred for key's lease (rendezvous hashing:
// membership.Preferred), or "" when nodes is empty.
func preferredOf(nodes []string, key procKey) string {
	return membership.Preferred(nodes, leaseKey(key))
}

// acquire takes key's lease for a new engine on this node. Without force it refuses (with
// errNotPreferred) a free lease another member is preferred for, and notes the work as pending.
// A lease another node holds fails with *elsewhereError.
func (ls *leaseSet) acquire(ctx context.Context, key procKey, force bool) (driver.Lease, error) {
	l, err := ls.svc.Acquire(ctx, leaseKey(key), force)
	var ee *membership.ElsewhereError
	switch {
	case errors.As(err, &ee):
		return driver.Lease{}, &elsewhereError{ee.Lease}
	case errors.Is(err, membership.ErrNotPreferred):
		return driver.Lease{}, errNotPreferred
	}
	return l, err
}

// owner returns what this node knows of key's lease: held here, or the last listing's row.
func (ls *leaseSet) owner(key procKey) (driver.Lease, bool) { return ls.svc.Owner(leaseKey(key)) }

// heldLease returns key's lease when this node holds it.
func (ls *leaseSet) heldLease(key procKey) (driver.Lease, bool) { return ls.svc.Held(leaseKey(key)) }

// held returns how many processor leases this node holds.
func (ls *leaseSet) held() int {
	n, _, _ := ls.svc.Totals()
	return n
}

// valid reports whether this node still holds key's lease at generation, by its own clock.
func (ls *leaseSet) valid(key procKey, generation int64) bool {
	return ls.svc.Valid(leaseKey(key), generation)
}

// mayWork is the MayWork of an engine under key's lease at generation
// (docs/reliability.md#a-node-that-freezes; membership.Service.MayWork): nil while the lease is
// this node's within its local deadline, or once a renewal confirmed it; LEASE_LOST otherwise.
func (ls *leaseSet) mayWork(ctx context.Context, key procKey, generation int64) error {
	err := ls.svc.MayWork(ctx, leaseKey(key), generation)
	if errors.Is(err, membership.ErrLost) {
		return leaseLostError(key, generation)
	}
	return err
}

// workable reports whether this node holds key's lease at generation, whether work may start
// under it now, and how many renewals had begun (membership.Service.Workable).
func (ls *leaseSet) workable(key procKey, generation int64) (held, ok bool, seq uint64) {
	return ls.svc.Workable(leaseKey(key), generation)
}

// drop forgets key's lease at generation without releasing it (it ran out).
func (ls *leaseSet) drop(key procKey, generation int64) { ls.svc.Drop(leaseKey(key), generation) }

// release gives key's lease up (idle: nothing left to do) after its engine closed.
func (ls *leaseSet) release(key procKey, generation int64, idle bool) {
	ls.svc.Release(leaseKey(key), generation, idle)
}

// rescan asks for a scan now (notifications may have been missed).
func (ls *leaseSet) rescan() { ls.svc.Rescan() }

// close ends the service's loops.
func (ls *leaseSet) close() { ls.svc.Close() }

// leaver releases a departing node's leases for a takeover, in groups (membership.Leaver,
// docs/postgres.md#graceful-hand-over).
type leaver struct{ lv *membership.Leaver }

// leave gives the node lease up and returns the leaver that gives up the engines' leases as they
// close; close it to wait for the last group.
func (ls *leaseSet) leave() leaver { return leaver{ls.svc.Leave()} }

// release hands key's lease at generation to the next group (its engine closed).
func (lv leaver) release(key procKey, generation int64) { lv.lv.Release(leaseKey(key), generation) }

// close waits until every lease handed to the leaver is released.
func (lv leaver) close() { lv.lv.Close() }

// Statuses is the status stored with each held lease at a renewal: its processor's (membership.Work).
func (ls *leaseSet) Statuses() map[string]string {
	st := ls.h.leaseStatuses()
	out := make(map[string]string, len(st))
	for k, s := range st {
		out[leaseKey(k)] = s
	}
	return out
}

// Lost stops the engine whose lease changed hands or ran out (membership.Work).
func (ls *leaseSet) Lost(key string) {
	if k, ok := parseLeaseKey(key); ok {
		ls.h.leaseLost(k)
	}
}

// Unconfirmed winds down the engine whose lease renewals could not confirm in time
// (membership.Work): false when none is open under it.
func (ls *leaseSet) Unconfirmed(key string) bool {
	k, ok := parseLeaseKey(key)
	return ok && ls.h.leaseUnconfirmed(k)
}

// Wanted returns the lease keys of the exact registrations, which each scan looks up
// (membership.Work).
func (ls *leaseSet) Wanted(limit int) []string {
	h := ls.h
	var keys []string
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.exact {
		if len(keys) == limit {
			break
		}
		keys = append(keys, leaseKey(k))
	}
	return keys
}

// Scan takes over and hands over what the service plans after a listing (membership.Work).
func (ls *leaseSet) Scan() {
	h := ls.h
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return
	}
	take, give := ls.svc.Plan(planner{h})
	h.mu.Unlock()
	for _, k := range take {
		if pk, ok := parseLeaseKey(k); ok {
			h.takeOver(pk)
		}
	}
	for _, k := range give {
		if pk, ok := parseLeaseKey(k); ok {
			h.handOff(pk)
		}
	}
}

// Freed takes over the announced free leases this node is preferred for (membership.Work).
func (ls *leaseSet) Freed(keys []string) {
	h := ls.h
	h.mu.Lock()
	take := ls.svc.TakeFreed(planner{h}, keys)
	h.mu.Unlock()
	for _, k := range take {
		if pk, ok := parseLeaseKey(k); ok {
			h.takeOver(pk)
		}
	}
}

// planner answers the membership service's questions about processors from the host's
// registrations and slots; h.mu is held while it is asked.
type planner struct{ h *Host }

// Runnable: a processor registered here whose engine is not open here; pinned registrations
// run even after an idle release.
func (p planner) Runnable(key string) (ok, pinned bool) {
	k, parsed := parseLeaseKey(key)
	if !parsed {
		return false, false
	}
	reg := p.h.registrationFor(k.path, k.slug)
	if reg == nil || p.h.slots[k] != nil {
		return false, false
	}
	return true, reg.pinned()
}

// Required: the exact registrations (not being added) whose engine is not open here.
func (p planner) Required() []string {
	var keys []string
	for k, reg := range p.h.exact {
		if p.h.slots[k] == nil && reg.added == nil {
			keys = append(keys, leaseKey(k))
		}
	}
	return keys
}

// Takeable: the host runs, and would open, the processor of an announced free lease.
func (p planner) Takeable(key string) bool {
	k, ok := parseLeaseKey(key)
	if !ok || p.h.shutdown || p.h.slots[k] != nil {
		return false
	}
	reg := p.h.registrationFor(k.path, k.slug)
	return reg != nil && reg.added == nil
}

// Handable: the processor's engine is open and unused (nothing reads or acquires it).
func (p planner) Handable(key string) bool {
	k, ok := parseLeaseKey(key)
	if !ok {
		return false
	}
	sl := p.h.slots[k]
	return sl != nil && sl.state == slotOpen && sl.refs == 0
}

// leaseLostError is the LEASE_LOST error of an append or claim refused after the lease ran out.
func leaseLostError(key procKey, generation int64) error {
	e := foldtype.NewError(foldtype.CodeLeaseLost, map[string]any{"lease": leaseKey(key), "generation": generation},
		"processor %q on %q: this node no longer holds its lease; nothing was written", key.slug, key.path)
	e.Retryable = false
	return e
}

// fencedStream is an engine's stream under a lease: work is refused once the lease ran out by
// this node's clock or changed hands.
type fencedStream struct {
	inner foldtype.Stream
	// fenced is inner fenced in the database (stream.EventStream.Fenced): its appends of durable
	// events commit only while the lease is still held at generation.
	fenced     foldtype.Stream
	ls         *leaseSet
	key        procKey
	generation int64
	// first is the first page of the opening catch-up, read with the stream (nil: none).
	first *firstPage
}

func (f *fencedStream) check(ctx context.Context) error {
	return f.ls.mayWork(ctx, f.key, f.generation)
}

// Append appends events under the lease. Within the lease's local deadline it appends as it is:
// no other node can hold the lease. Past it, a batch with a durable event (an event ProcessEvent
// or a blocker emits, once their effects ran) needs only that this node has not learnt the lease
// lost, and goes through the database's fence, which refuses it if another node took the lease
// over: it does not wait for a renewal to confirm the lease, so the work that ran is recorded
// rather than run again by the next owner (docs/reliability.md#a-node-that-freezes). Ephemerals
// alone (live-state deltas), which nothing fences in the database, wait for the confirmation.
func (f *fencedStream) Append(ctx context.Context, events ...foldtype.EventInput) ([]foldtype.Event, error) {
	held, ok, _ := f.ls.workable(f.key, f.generation)
	switch {
	case ok:
		return f.inner.Append(ctx, events...)
	case !held:
		return nil, leaseLostError(f.key, f.generation)
	case f.fenced != nil && slices.ContainsFunc(events, func(in foldtype.EventInput) bool { return !in.Ephemeral }):
		return f.fenced.Append(ctx, events...)
	}
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return f.inner.Append(ctx, events...)
}

func (f *fencedStream) Read(ctx context.Context, after int64, limit int) (foldtype.ReadPage, error) {
	if p, ok := f.first.take(after, limit); ok {
		return p, nil
	}
	return f.inner.Read(ctx, after, limit)
}

func (f *fencedStream) Claim(ctx context.Context, at time.Time) error {
	if err := f.check(ctx); err != nil {
		return err
	}
	return f.inner.Claim(ctx, at)
}
