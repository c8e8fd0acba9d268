package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
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
// Each node also holds a node lease ("node" + id), renewed with its processor leases: the live
// node leases are the cluster's members. The assignment rule is rendezvous hashing: the node
// preferred for a key is the member with the highest hash of (node id, key). A node takes a free
// lease when it is preferred for it (or when the preferred node left it free for several scans,
// or a read or a due claim needs it now), and hands a lease it holds to the preferred node when
// another member is preferred (a node joined). One loop per node, every scan interval, reads a
// bounded part of the lease table in one round trip — the live members, at most maxFreePerScan of
// the leases waiting for a taker (paged through in key order), and whether the few leases it has
// work for are live elsewhere — takes over the leases of dead or departed holders it is preferred
// for, and hands over the ones it should not hold; apart from it, every quarter of the lease
// time, one statement renews what the node holds and stores each processor's status with it. A
// lease released for a takeover is announced (driver.LeaseWatcher): the preferred node takes it
// at once, without waiting for its next scan.

const (
	// DefaultLeaseTTL is how long a lease lasts without renewal: a killed node's processors resume
	// elsewhere within about this long.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultProcessorPrefix is where nodes serve processor routes (the server's default).
	DefaultProcessorPrefix = "/v1/processor/"

	leasePrefix = "processor\x1f"
	nodePrefix  = "node\x1f"
	// maxHandoffsPerScan bounds the leases one scan hands to other nodes.
	maxHandoffsPerScan = 32
	// maxFreePerScan bounds the leases waiting for a taker that one scan reads (the rest are
	// read by the next scans, in key order).
	maxFreePerScan = 256
	// maxKeysPerScan bounds the leases one scan looks up by key (processors this node has work
	// for that may run elsewhere).
	maxKeysPerScan = 256
	// kickGap is the least time between two scans asked for out of turn.
	kickGap = 20 * time.Millisecond
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

type leaseSet struct {
	h     *Host
	drv   driver.Driver
	node  string
	addr  string
	ttl   time.Duration
	every time.Duration
	// margin is how long before a held lease's local deadline this node stops starting work
	// under it (docs/reliability.md#a-node-that-freezes).
	margin time.Duration

	mu        sync.Mutex
	held      map[procKey]driver.Lease
	view      map[procKey]driver.Lease
	nodes     []string             // live members, sorted, this node included
	firstSeen map[string]time.Time // when each member was first seen live
	me        driver.Lease
	pending   map[procKey]bool      // a commit was seen while another node held the lease
	candSince map[procKey]time.Time // free leases this node is not preferred for, since when
	lastRenew time.Time
	left      bool      // the node lease was given up (shutting down)
	joinUntil time.Time // until then this node takes no lease by preference: it learns the members first
	freeAfter string    // where the next scan's page of free leases starts
	freed     []procKey // leases other holders released for a takeover, not yet looked at
	scanNow   bool      // a full scan is asked for (members changed, notifications missed)
	joinScan  sync.Once // the scan at joinUntil is asked for
	stopWatch func()
	// renewing admits one renewal at a time (the loop's, or one an engine asked for when its
	// lease's local deadline passed); renewals counts those begun, under mu.
	renewing chan struct{}
	renewals uint64

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	renewed chan struct{} // closed when the renewal loop returned
}

func newNodeID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// startLeases acquires the node lease and starts the lease loop.
func (h *Host) startLeases(ctx context.Context) error {
	ls := &leaseSet{
		h: h, drv: h.store.Driver(), node: h.cfg.NodeID, addr: strings.TrimRight(h.cfg.Addr, "/"), ttl: h.cfg.LeaseTTL,
		held: map[procKey]driver.Lease{}, view: map[procKey]driver.Lease{}, firstSeen: map[string]time.Time{},
		pending: map[procKey]bool{}, candSince: map[procKey]time.Time{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), renewed: make(chan struct{}),
		renewing: make(chan struct{}, 1),
	}
	ls.every = min(ls.ttl/6, 500*time.Millisecond)
	ls.margin = leaseMargin(ls.ttl)
	start := time.Now()
	me, ok, err := ls.drv.AcquireLease(ctx, nodePrefix+ls.node, ls.node, ls.addr, ls.ttl)
	if err != nil {
		return fmt.Errorf("host: join the cluster: %w", err)
	}
	if !ok {
		return fmt.Errorf("host: node id %q is in use by a live node", ls.node)
	}
	ls.me, ls.lastRenew = localDeadline(me, start, ls.ttl), time.Now()
	// Nodes started together each see only the ones that joined before their first listing: a node
	// takes leases by preference only once it listed the members again, so the first one up does
	// not take everything (and hand it over again). Reads, due claims and exact registrations take
	// theirs at once. On an exclusive database (SQLite) no other process can join.
	if !ls.drv.Exclusive() {
		ls.joinUntil = ls.lastRenew.Add(2 * ls.every)
	}
	ls.nodes = []string{ls.node}
	ls.firstSeen[ls.node] = time.Now()
	h.leases = ls
	if lw, ok := ls.drv.(driver.LeaseWatcher); ok {
		ls.stopWatch = lw.WatchLeases(ls.releasedElsewhere)
	}
	if err := ls.list(ctx); err != nil {
		h.log.Warn("host: list leases", "err", err)
	}
	go ls.run()
	go ls.renewLoop()
	return nil
}

// preferredLocked returns the member preferred for key. ls.mu held.
func (ls *leaseSet) preferredLocked(key procKey) string {
	if p := preferredOf(ls.nodes, key); p != "" {
		return p
	}
	return ls.node
}

// preferredOf returns the member of nodes preferred for key's lease (rendezvous hashing: the
// highest hash of node id and lease key), or "" when nodes is empty.
func preferredOf(nodes []string, key procKey) string {
	best, bestScore := "", uint64(0)
	for i, n := range nodes {
		f := fnv.New64a()
		f.Write([]byte(n))
		f.Write([]byte{0})
		f.Write([]byte(leaseKey(key)))
		if s := mix64(f.Sum64()); i == 0 || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}

// mix64 spreads a hash's bits (a 64-bit finalizer: xor-shifts and multiplications by odd
// constants), so ids and keys that share long prefixes still rank nodes uniformly.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// acquire takes key's lease for a new engine on this node. Without force it refuses (with
// errNotPreferred) a free lease another member is preferred for, and notes the work as pending.
// A lease another node holds fails with *elsewhereError.
func (ls *leaseSet) acquire(ctx context.Context, key procKey, force bool) (driver.Lease, error) {
	ls.mu.Lock()
	if v, ok := ls.view[key]; ok && v.Live && v.Holder != ls.node && time.Now().Before(v.Expires) {
		ls.pending[key] = true
		ls.mu.Unlock()
		return driver.Lease{}, &elsewhereError{v}
	}
	if !force && (ls.preferredLocked(key) != ls.node || time.Now().Before(ls.joinUntil)) {
		ls.pending[key] = true
		ls.mu.Unlock()
		if ls.joinUntil.After(time.Now()) {
			ls.wakeAt(ls.joinUntil)
		}
		return driver.Lease{}, errNotPreferred
	}
	ls.mu.Unlock()
	start := time.Now()
	l, ok, err := ls.drv.AcquireLease(ctx, leaseKey(key), ls.node, ls.addr, ls.ttl)
	if err != nil {
		return driver.Lease{}, err
	}
	l = localDeadline(l, start, ls.ttl)
	if !ok {
		cur, err := ls.lookup(ctx, key)
		if err != nil {
			return driver.Lease{}, err
		}
		ls.mu.Lock()
		ls.pending[key] = true
		ls.mu.Unlock()
		return driver.Lease{}, &elsewhereError{cur}
	}
	ls.mu.Lock()
	prev, seen := ls.view[key]
	ls.held[key], ls.view[key] = l, l
	ls.h.noteTakeover(prev.Holder, seen, ls.node)
	delete(ls.pending, key)
	delete(ls.candSince, key)
	ls.mu.Unlock()
	return l, nil
}

// lookup reads key's lease from the database and records it in the view.
func (ls *leaseSet) lookup(ctx context.Context, key procKey) (driver.Lease, error) {
	all, err := ls.drv.Leases(ctx, driver.LeaseQuery{Keys: []string{leaseKey(key)}})
	if err != nil {
		return driver.Lease{}, err
	}
	for _, l := range all {
		if l.Key == leaseKey(key) {
			ls.mu.Lock()
			ls.view[key] = l
			ls.mu.Unlock()
			return l, nil
		}
	}
	return driver.Lease{}, nil
}

// owner returns what this node knows of key's lease: held here, or the last listing's row.
func (ls *leaseSet) owner(key procKey) (driver.Lease, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.held[key]; ok {
		return l, true
	}
	l, ok := ls.view[key]
	return l, ok
}

// heldLease returns key's lease when this node holds it.
func (ls *leaseSet) heldLease(key procKey) (driver.Lease, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.held[key]
	return l, ok
}

// valid reports whether this node still holds key's lease at generation, by its own clock.
func (ls *leaseSet) valid(key procKey, generation int64) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.held[key]
	return ok && l.Generation == generation && time.Now().Before(l.Expires)
}

// leaseMargin is how long before a lease's local deadline its holder stops starting work under it:
// a tenth of the lease time, at most a second. It covers the database's clock running faster
// than this node's between two renewals.
func leaseMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// localDeadline sets l.Expires to this node's deadline for l: the driver's expiry, but never
// later than ttl after start, when the statement that acquired or renewed l was sent, on this
// process's monotonic clock. A reply that arrives late (the node froze, the network stalled)
// so extends nothing past what the database could have granted when it was asked: another node
// may take the lease over as soon as that ran out.
func localDeadline(l driver.Lease, start time.Time, ttl time.Duration) driver.Lease {
	left := ttl
	if d := l.Expires.Sub(start); d < left {
		left = d
	}
	l.Expires = start.Add(left) // start carries the monotonic reading, so Expires does too
	return l
}

// mayWork is the MayWork of an engine under key's lease at generation
// (docs/reliability.md#a-node-that-freezes): nil while this node holds the lease and its local
// deadline (less the margin) has not passed on the monotonic clock. A node that froze, or whose
// renewals stalled, past that deadline starts nothing more under the lease until a renewal
// confirmed it: the renewal renews it (nobody took it over meanwhile) or finds it lost, and then
// the engine stops. The answer is LEASE_LOST unless the lease is confirmed.
func (ls *leaseSet) mayWork(ctx context.Context, key procKey, generation int64) error {
	held, ok, seq := ls.workable(key, generation)
	if ok {
		return nil
	}
	if !held {
		return leaseLostError(key, generation)
	}
	ls.h.log.Warn("host: processor lease past its local deadline; no more work under it until it is renewed",
		"path", key.path, "slug", key.slug, "generation", generation)
	// A renewal that failed, or whose answer came too late to count, leaves the lease neither
	// confirmed nor lost: ask again, a few times. Still unconfirmed, the node gives the engine
	// up as if the lease were lost (without releasing it): once the lease ran out in the database
	// a scan takes it over — this node's or another's — and a new engine catches up from the
	// checkpoint, so no work waits for a push that may never come.
	for range confirmAttempts {
		if err := ls.confirm(ctx, seq); err != nil {
			return err
		}
		held, ok, next := ls.workable(key, generation)
		if ok {
			return nil
		}
		if !held {
			break
		}
		seq = next
	}
	if held, _, _ := ls.workable(key, generation); held {
		ls.h.log.Warn("host: processor lease not confirmed; stopping its engine until the lease is taken again",
			"path", key.path, "slug", key.slug, "generation", generation)
		ls.drop(key, generation)
		ls.h.leaseLost(key)
	}
	return leaseLostError(key, generation)
}

// confirmAttempts bounds the renewals one mayWork asks for.
const confirmAttempts = 3

// workable reports whether this node holds key's lease at generation (held), whether work may
// start under it now (ok: before its local deadline less the margin), and how many renewals had
// begun.
func (ls *leaseSet) workable(key procKey, generation int64) (held, ok bool, seq uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, found := ls.held[key]
	held = found && l.Generation == generation
	return held, held && time.Now().Before(l.Expires.Add(-ls.margin)), ls.renewals
}

// confirm renews the node's leases now, unless a renewal begun after seq has ended meanwhile
// (its answer is as fresh as this one's would be).
func (ls *leaseSet) confirm(ctx context.Context, seq uint64) error {
	select {
	case ls.renewing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-ls.renewing }()
	ls.mu.Lock()
	fresh := ls.renewals != seq
	ls.mu.Unlock()
	if fresh {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, ls.ttl)
	defer cancel()
	ls.renewLocked(rctx)
	return nil
}

// drop forgets key's lease at generation without releasing it (it ran out).
func (ls *leaseSet) drop(key procKey, generation int64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.held[key]; ok && l.Generation == generation {
		delete(ls.held, key)
	}
}

// release gives key's lease up (idle: nothing left to do) after its engine closed.
func (ls *leaseSet) release(key procKey, generation int64, idle bool) {
	l, ok := ls.forget(key, generation, idle)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ls.ttl)
	defer cancel()
	if err := ls.drv.ReleaseLease(ctx, l, idle); err != nil {
		ls.h.log.Warn("host: release a processor lease", "path", key.path, "slug", key.slug, "err", err)
	}
}

// forget drops key's lease at generation from what this node holds, as released, and returns it
// for the driver to release (false: not held at that generation).
func (ls *leaseSet) forget(key procKey, generation int64, idle bool) (driver.Lease, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.held[key]
	if !ok || l.Generation != generation {
		return driver.Lease{}, false
	}
	delete(ls.held, key)
	if !idle && !ls.drv.Exclusive() {
		ls.h.noteHandover()
	}
	v := l
	v.Live, v.Idle = false, idle
	ls.view[key] = v
	return l, true
}

// rescan asks the loop for a scan now (notifications may have been missed).
func (ls *leaseSet) rescan() {
	ls.mu.Lock()
	ls.scanNow = true
	ls.mu.Unlock()
	ls.wake()
}

// wakeAt asks for a full scan at t (the end of the join period), once.
func (ls *leaseSet) wakeAt(t time.Time) {
	ls.joinScan.Do(func() { time.AfterFunc(time.Until(t), ls.rescan) })
}

func (ls *leaseSet) wake() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// releasedElsewhere is the driver's notice of a lease released by another holder for a takeover
// (a node stopping or handing a processor over): the loop looks at it now. A member's node lease
// asks for a full scan (the members changed). It never blocks.
func (ls *leaseSet) releasedElsewhere(key, holder string) {
	if holder == ls.node {
		return
	}
	if id, ok := strings.CutPrefix(key, nodePrefix); ok {
		// The member left: it is preferred for nothing from now on, so the leases it releases
		// with or after its node lease are taken by their next preferred node at once, before
		// the scan that lists the members again.
		ls.mu.Lock()
		if i := slices.Index(ls.nodes, id); i >= 0 && id != ls.node {
			ls.nodes = slices.Delete(slices.Clone(ls.nodes), i, i+1)
		}
		ls.mu.Unlock()
		ls.rescan()
		return
	}
	k, ok := parseLeaseKey(key)
	if !ok {
		return
	}
	ls.mu.Lock()
	if v, ok := ls.view[k]; ok && v.Holder == holder {
		v.Live = false
		ls.view[k] = v
	}
	if len(ls.freed) < maxFreePerScan {
		ls.freed = append(ls.freed, k)
	} else {
		ls.scanNow = true // too many at once: the scan finds them
	}
	ls.mu.Unlock()
	ls.wake()
}

// takeFreed takes over the announced free leases this node is preferred for; the others are left
// to their preferred node (and to the scans, should it not take them).
func (ls *leaseSet) takeFreed(keys []procKey) {
	h := ls.h
	var take []procKey
	h.mu.Lock()
	ls.mu.Lock()
	for _, k := range keys {
		if _, mine := ls.held[k]; mine || h.shutdown || h.slots[k] != nil {
			continue
		}
		if reg := h.registrationFor(k.path, k.slug); reg == nil || reg.added != nil {
			continue
		}
		if ls.preferredLocked(k) == ls.node {
			take = append(take, k)
		}
	}
	ls.mu.Unlock()
	h.mu.Unlock()
	for _, k := range take {
		h.takeOver(k)
	}
}

// renewLoop renews every quarter of the lease time, apart from the scans, so a slow scan never
// delays a renewal.
func (ls *leaseSet) renewLoop() {
	defer close(ls.renewed)
	t := time.NewTicker(ls.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-t.C:
		}
		select {
		case ls.renewing <- struct{}{}:
		case <-ls.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), ls.ttl)
		ls.renewLocked(ctx)
		cancel()
		<-ls.renewing
	}
}

func (ls *leaseSet) run() {
	defer close(ls.done)
	t := time.NewTicker(ls.every)
	defer t.Stop()
	var last time.Time
	for {
		kicked := false
		select {
		case <-ls.stop:
			return
		case <-t.C:
		case <-ls.kick:
			kicked = true
		}
		ls.mu.Lock()
		freed, full := ls.freed, ls.scanNow || !kicked
		ls.freed, ls.scanNow = nil, false
		ls.mu.Unlock()
		if len(freed) > 0 {
			ls.takeFreed(freed)
		}
		if full {
			if kicked {
				// Out of turn (members changed): at most one such scan per kickGap.
				if wait := kickGap - time.Since(last); wait > 0 {
					select {
					case <-ls.stop:
						return
					case <-time.After(wait):
					}
				}
			}
			last = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), ls.ttl)
			ls.tick(ctx)
			cancel()
		}
	}
}

// list reads the bounded part of the lease table a scan needs, in one round trip: the live
// members, the next page of leases waiting for a taker, and which of the leases this node has
// work for (pending commits, exact registrations) are live. The view keeps what it learnt of
// other holders' live leases (from these reads and from lookups) until they expire by their
// last known expiry; a lease announced released drops out at once.
func (ls *leaseSet) list(ctx context.Context) error {
	h := ls.h
	var keys []string
	h.mu.Lock()
	for k := range h.exact {
		if len(keys) == maxKeysPerScan {
			break
		}
		keys = append(keys, leaseKey(k))
	}
	h.mu.Unlock()
	ls.mu.Lock()
	after := ls.freeAfter
	for k := range ls.pending {
		if len(keys) >= maxKeysPerScan {
			break
		}
		keys = append(keys, leaseKey(k))
	}
	ls.mu.Unlock()
	qs := []driver.LeaseQuery{
		{Prefix: nodePrefix, Live: true},
		{Prefix: leasePrefix, Free: true, After: after, Limit: maxFreePerScan},
	}
	if len(keys) > 0 {
		qs = append(qs, driver.LeaseQuery{Prefix: leasePrefix, Keys: keys, Live: true})
	}
	all, err := ls.drv.Leases(ctx, qs...)
	if err != nil {
		return err
	}
	now := time.Now()
	nodes := []string{ls.node}
	found := map[procKey]driver.Lease{}
	free, lastFree := 0, ""
	for _, l := range all {
		if id, ok := strings.CutPrefix(l.Key, nodePrefix); ok {
			if l.Live && id != ls.node {
				nodes = append(nodes, id)
			}
			continue
		}
		k, ok := parseLeaseKey(l.Key)
		if !ok {
			continue
		}
		if !l.Live {
			free++
			lastFree = l.Key
		}
		found[k] = l
	}
	sort.Strings(nodes)
	nodes = slices.Compact(nodes)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if free >= maxFreePerScan {
		ls.freeAfter = lastFree // more wait beyond this page: the next scan reads them
	} else {
		ls.freeAfter = ""
	}
	view := make(map[procKey]driver.Lease, len(ls.held)+len(found))
	for k, l := range ls.view {
		if l.Live && l.Holder != ls.node && now.Before(l.Expires) {
			view[k] = l // another holder's, still live by its last known expiry
		}
	}
	for k, l := range found {
		view[k] = l
	}
	for k, l := range ls.held {
		view[k] = l // what this node holds, as it knows it (the listing may predate a renewal)
	}
	ls.view = view
	seen := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		if t, ok := ls.firstSeen[n]; ok {
			seen[n] = t
		} else {
			seen[n] = now
		}
	}
	ls.nodes, ls.firstSeen = nodes, seen
	return nil
}

// tick is one scan: list, renew, take over, hand over.
func (ls *leaseSet) tick(ctx context.Context) {
	h := ls.h
	if err := ls.list(ctx); err != nil {
		h.log.Warn("host: list leases", "err", err)
	}
	h.mu.Lock()
	down := h.shutdown
	h.mu.Unlock()
	if down {
		return
	}
	take, give := ls.plan()
	for _, k := range take {
		h.takeOver(k)
	}
	for _, k := range give {
		h.handOff(k)
	}
}

// renewLocked extends the node's leases, storing each processor's status with its lease, and
// stops the engines whose lease changed hands or ran out. The caller holds ls.renewing: one
// renewal at a time. A renewed lease's local deadline counts from when the renewal was sent
// (localDeadline), never from when its answer came.
func (ls *leaseSet) renewLocked(ctx context.Context) {
	statuses := ls.h.leaseStatuses()
	ls.mu.Lock()
	ls.renewals++
	held := make([]driver.Lease, 0, len(ls.held)+1)
	held = append(held, ls.me)
	for k, l := range ls.held {
		l.Status = statuses[k]
		held = append(held, l)
	}
	ls.mu.Unlock()
	start := time.Now()
	renewed, err := ls.drv.RenewLeases(ctx, ls.node, held, ls.ttl)
	var lost []procKey
	ls.mu.Lock()
	if err != nil {
		ls.h.log.Warn("host: renew leases", "err", err)
		for k, l := range ls.held {
			if start.After(l.Expires) {
				lost = append(lost, k)
				delete(ls.held, k)
			}
		}
	} else {
		ls.lastRenew = start
		got := make(map[string]driver.Lease, len(renewed))
		for _, l := range renewed {
			got[l.Key] = l
		}
		if l, ok := got[ls.me.Key]; ok {
			ls.me = localDeadline(l, start, ls.ttl)
		} else if !ls.left {
			// The node lease lapsed and was not renewed: take it again (nobody else takes it).
			again := time.Now()
			if me, ok, err := ls.drv.AcquireLease(ctx, nodePrefix+ls.node, ls.node, ls.addr, ls.ttl); err == nil && ok {
				ls.me = localDeadline(me, again, ls.ttl)
			}
		}
		for _, h := range held[1:] {
			k, _ := parseLeaseKey(h.Key)
			cur, ok := ls.held[k]
			if !ok || cur.Generation != h.Generation {
				continue // released or re-acquired meanwhile
			}
			if l, ok := got[h.Key]; ok {
				ls.held[k] = localDeadline(l, start, ls.ttl)
			} else {
				lost = append(lost, k)
				delete(ls.held, k)
			}
		}
	}
	ls.mu.Unlock()
	for _, k := range lost {
		ls.h.log.Warn("host: processor lease lost; stopping its engine", "path", k.path, "slug", k.slug)
		ls.h.leaseLost(k)
	}
}

// plan decides which free leases this node takes over and which held ones it hands to the
// preferred node.
func (ls *leaseSet) plan() (take, give []procKey) {
	h := ls.h
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	cands := map[procKey]bool{}
	for k, l := range ls.view {
		if _, mine := ls.held[k]; mine || l.Live {
			continue
		}
		reg := h.registrationFor(k.path, k.slug)
		if reg == nil || h.slots[k] != nil {
			continue
		}
		if !l.Idle || ls.pending[k] || reg.pinned() {
			cands[k] = true
		}
	}
	for k := range ls.pending {
		l, ok := ls.view[k]
		switch {
		case ok && l.Live:
			delete(ls.pending, k) // its holder runs it
		case h.slots[k] == nil && h.registrationFor(k.path, k.slug) != nil:
			cands[k] = true
		default:
			delete(ls.pending, k)
		}
	}
	for k, reg := range h.exact {
		if l, ok := ls.view[k]; (!ok || !l.Live) && h.slots[k] == nil && reg.added == nil {
			cands[k] = true
		}
	}
	for k := range ls.candSince {
		if !cands[k] {
			delete(ls.candSince, k)
		}
	}
	if now.Before(ls.joinUntil) {
		// Still learning the members: nothing is taken by preference yet (reads, claims and
		// registrations take theirs at once); the scan at joinUntil takes this node's share.
		return nil, nil
	}
	for k := range cands {
		if ls.preferredLocked(k) == ls.node {
			take = append(take, k)
			continue
		}
		since, ok := ls.candSince[k]
		if !ok {
			ls.candSince[k] = now
		} else if now.Sub(since) >= 4*ls.every {
			take = append(take, k) // the preferred node left it free: run it here
		}
	}
	for k := range ls.held {
		if len(give) >= maxHandoffsPerScan {
			break
		}
		p := ls.preferredLocked(k)
		if p == ls.node || now.Sub(ls.firstSeen[p]) < 2*ls.every {
			continue
		}
		if sl := h.slots[k]; sl != nil && sl.state == slotOpen && sl.refs == 0 {
			give = append(give, k)
		}
	}
	return take, give
}

// close ends the loops.
func (ls *leaseSet) close() {
	if ls.stopWatch != nil {
		ls.stopWatch()
	}
	close(ls.stop)
	<-ls.done
	<-ls.renewed
}

// leaver releases a departing node's leases for a takeover, in groups (group commit): the node
// lease first, so other nodes stop preferring this one at once, with the engines' leases that
// were handed to it by then; each lease handed to it while a group's statement is in flight goes
// in the next group (driver.ReleaseLeases: one statement and one announcement per group on
// PostgreSQL). A node with many engines leaves in a few round trips instead of one per engine,
// and each engine's lease follows as soon as that engine closed (docs/postgres.md#graceful-hand-over).
type leaver struct {
	ls      *leaseSet
	mu      sync.Mutex
	pending []driver.Lease
	closed  bool
	kick    chan struct{}
	done    chan struct{}
}

// leave gives the node lease up and returns the leaver that gives up the engines' leases as they
// close; close it to wait for the last group.
func (ls *leaseSet) leave() *leaver {
	ls.mu.Lock()
	me := ls.me
	ls.left = true
	ls.mu.Unlock()
	lv := &leaver{ls: ls, pending: []driver.Lease{me}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go lv.run()
	return lv
}

// release hands key's lease at generation to the next group (its engine closed).
func (lv *leaver) release(key procKey, generation int64) {
	l, ok := lv.ls.forget(key, generation, false)
	if !ok {
		return
	}
	lv.mu.Lock()
	lv.pending = append(lv.pending, l)
	lv.mu.Unlock()
	lv.wake()
}

func (lv *leaver) wake() {
	select {
	case lv.kick <- struct{}{}:
	default:
	}
}

func (lv *leaver) run() {
	defer close(lv.done)
	for {
		lv.mu.Lock()
		group, closed := lv.pending, lv.closed
		lv.pending = nil
		lv.mu.Unlock()
		if len(group) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), lv.ls.ttl)
			start := time.Now()
			if err := driver.ReleaseLeases(ctx, lv.ls.drv, group, false); err != nil {
				lv.ls.h.log.Warn("host: release leases when leaving the cluster", "leases", len(group), "err", err)
			}
			lv.ls.h.log.Debug("host: released leases when leaving the cluster", "leases", len(group), "took", time.Since(start))
			cancel()
			continue
		}
		if closed {
			return
		}
		<-lv.kick
	}
}

// close waits until every lease handed to the leaver is released.
func (lv *leaver) close() {
	lv.mu.Lock()
	lv.closed = true
	lv.mu.Unlock()
	lv.wake()
	<-lv.done
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
