// Package membership is the cluster's membership service (docs/postgres.md#processors-and-leases):
// the one implementation of node liveness, the member list, rendezvous assignment, the join
// delay, and leases — acquisition, renewal with local deadlines on the monotonic clock, the "may
// work under this lease" confirmation, hand-over, release and the takeover announcements
// (docs/reliability.md#a-node-that-freezes).
//
// A [Service] is one node's membership: its node lease ("node" + id, [NodePrefix]), renewed with
// the work leases it holds; the live node leases are the members. The work its leases name is its
// owner's (package host runs processors under them): the service decides who holds what and keeps
// it held, the owner ([Work], [Planner]) says what work exists here and runs or stops it. A
// [Leader] is the same local-deadline rule for one lease that one node of the cluster holds (the
// subscription delivery loop's): it needs no member list.
//
// Everything here speaks of lease keys (strings) and driver leases, never of processors, so it sits
// below both of its users, on the driver's lease API (driver.Driver's AcquireLease, RenewLeases,
// ReleaseLease, Leases, and driver.LeaseWatcher).
package membership

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// How a node runs (docs/postgres.md#processors-and-leases).
//
// Each node holds a node lease (NodePrefix + id), renewed with its work leases: the live node
// leases are the cluster's members. The assignment rule is rendezvous hashing: the node preferred
// for a key is the member with the highest hash of (node id, key). A node takes a free lease when
// it is preferred for it (or when the preferred node left it free for several scans, or its owner
// needs it now), and hands a lease it holds to the preferred node when another member is preferred
// (a node joined). One loop per node, every scan interval, reads a bounded part of the lease table
// in one round trip — the live members, at most maxFreePerScan of the leases waiting for a taker
// (paged through in key order), and whether the few leases it has work for are live elsewhere —
// takes over the leases of dead or departed holders it is preferred for, and hands over the ones
// it should not hold; apart from it, every quarter of the lease time, one statement renews what
// the node holds and stores each lease's status with it. A lease released for a takeover is
// announced (driver.LeaseWatcher): the preferred node takes it at once, without waiting for its
// next scan.

// NodePrefix starts the key of every node lease: NodePrefix + node id.
const NodePrefix = "node\x1f"

const (
	// maxHandoffsPerScan bounds the leases one scan hands to other nodes.
	maxHandoffsPerScan = 32
	// maxFreePerScan bounds the leases waiting for a taker that one scan reads (the rest are
	// read by the next scans, in key order).
	maxFreePerScan = 256
	// maxKeysPerScan bounds the leases one scan looks up by key (work this node has that may run
	// elsewhere).
	maxKeysPerScan = 256
	// kickGap is the least time between two scans asked for out of turn.
	kickGap = 20 * time.Millisecond
	// confirmAttempts bounds the renewals one MayWork asks for.
	confirmAttempts = 3
)

// ErrNotPreferred is an acquisition refused because another member is preferred for the free
// lease (or this node is still in its join delay).
var ErrNotPreferred = errors.New("membership: another node is preferred for this lease")

// ErrLost is MayWork's refusal: this node does not hold the lease at that generation (it changed
// hands, ran out, or could not be confirmed in time).
var ErrLost = errors.New("membership: this node no longer holds the lease")

// ElsewhereError is an acquisition refused because another node holds the lease.
type ElsewhereError struct {
	// Lease is the lease as this node knows it (its holder and address).
	Lease driver.Lease
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("membership: lease %q is held by node %s", e.Lease.Key, e.Lease.Holder)
}

// Work is what a Service asks of its owner about the work its leases name. The service calls
// every method without holding its own lock, from its loops (or from the caller of MayWork, for
// Lost); none may call back into the service while holding a lock the service's callers hold.
type Work interface {
	// Statuses returns the status to store with each held lease, by key, at a renewal.
	Statuses() map[string]string
	// Lost stops the work of key at once: its lease changed hands or ran out (confirmed), or
	// renewals could not confirm it in time and Unconfirmed declined it (the service gave the
	// lease up without releasing it).
	Lost(key string)
	// Unconfirmed is called when renewals could not confirm key's lease before its local
	// deadline, which does not mean another node took it: the owner stops starting work under
	// it, lets the unit in progress finish — its writes are fenced in the database, so they
	// commit only if nobody took the lease over — and then releases the lease or leaves it to
	// run out itself, and answers true. A unit cut short after its effects ran would have them
	// run again by the next holder. It may be called again while that work winds down (each
	// renewal that fails reports the lease again), and answers true then too. False (no work is
	// running under it): the service drops the lease and calls Lost.
	Unconfirmed(key string) bool
	// Wanted returns at most limit keys of work this node has (whatever it must run) whose
	// leases each scan looks up.
	Wanted(limit int) []string
	// Scan is called after each scan listed the lease table: the owner, holding the lock its
	// Planner reads under, calls [Service.Plan] and then takes over and hands over what it
	// returned (unless the owner is shutting down).
	Scan()
	// Freed is called with keys of leases other holders released for a takeover: the owner,
	// holding the lock its Planner reads under, calls [Service.TakeFreed] and takes over what it
	// returned.
	Freed(keys []string)
}

// Planner answers the service's questions about work while a scan decides (Service.Plan,
// Service.TakeFreed). Its owner's lock is held throughout, and the service's own.
type Planner interface {
	// Runnable reports whether this node knows key's work and runs none of it now (ok), and
	// whether that work must run even after its lease was released idle (pinned).
	Runnable(key string) (ok, pinned bool)
	// Required returns the keys of work that must run somewhere even when no lease row exists
	// yet, and that this node does not run now.
	Required() []string
	// Takeable reports whether this node would take key's announced free lease over now.
	Takeable(key string) bool
	// Handable reports whether key's work may be handed to another node now (nothing uses it).
	Handable(key string) bool
}

// Config configures a Service.
type Config struct {
	// Driver holds the lease table.
	Driver driver.Driver
	// Node is this node's id (the holder of its leases); Addr is where it serves, stored with its
	// leases for other nodes to read.
	Node, Addr string
	// TTL is how long a lease lasts without renewal.
	TTL time.Duration
	// Prefix starts the keys of the work leases the service takes, scans and hands over.
	Prefix string
	// Work is the owner of the work the leases name.
	Work Work
	// Logger receives the service's logs; Noun names its leases in them ("processor" logs
	// "processor lease lost"), and Label gives the attributes of one key (nil: the key).
	Logger *slog.Logger
	Noun   string
	Label  func(key string) []any
}

// Service is one node's membership (see the package documentation). [Join] acquires the node
// lease, [Service.Start] starts the loops; [Service.Leave] and [Service.Close] end them.
type Service struct {
	cfg   Config
	drv   driver.Driver
	work  Work
	log   *slog.Logger
	node  string
	addr  string
	ttl   time.Duration
	every time.Duration
	// margin is how long before a held lease's local deadline this node stops starting work
	// under it (docs/reliability.md#a-node-that-freezes).
	margin time.Duration

	mu        sync.Mutex
	held      map[string]driver.Lease
	view      map[string]driver.Lease
	nodes     []string             // live members, sorted, this node included
	firstSeen map[string]time.Time // when each member was first seen live
	me        driver.Lease
	pending   map[string]bool      // work was seen while another node held the lease
	candSince map[string]time.Time // free leases this node is not preferred for, since when
	lastRenew time.Time
	left      bool      // the node lease was given up (shutting down)
	joinUntil time.Time // until then this node takes no lease by preference: it learns the members first
	// cutOff is set when a listing or a renewal failed: the database did not answer this node,
	// and maybe not the others either. The next listing that succeeds starts a join period again
	// (rejoin).
	cutOff    bool
	freeAfter string    // where the next scan's page of free leases starts
	freed     []string  // leases other holders released for a takeover, not yet looked at
	scanNow   bool      // a full scan is asked for (members changed, notifications missed)
	joinScan  time.Time // the join period's end a scan is asked for (wakeAtLocked)
	stopWatch func()
	// renewing admits one renewal at a time (the loop's, or one an engine asked for when its
	// lease's local deadline passed); renewals counts those begun, under mu.
	renewing chan struct{}
	renewals uint64

	takeovers, handovers atomic.Uint64

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	renewed chan struct{} // closed when the renewal loop returned
}

// newService builds a service from cfg without touching the driver.
func newService(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Noun == "" {
		cfg.Noun = "work"
	}
	s := &Service{
		cfg: cfg, drv: cfg.Driver, work: cfg.Work, log: cfg.Logger, node: cfg.Node, addr: cfg.Addr, ttl: cfg.TTL,
		held: map[string]driver.Lease{}, view: map[string]driver.Lease{}, firstSeen: map[string]time.Time{},
		pending: map[string]bool{}, candSince: map[string]time.Time{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), renewed: make(chan struct{}),
		renewing: make(chan struct{}, 1),
	}
	s.every = min(s.ttl/6, 500*time.Millisecond)
	s.margin = Margin(s.ttl)
	s.me = driver.Lease{Key: NodePrefix + s.node, Holder: s.node}
	return s
}

// Join acquires the node lease of cfg.Node: the node is a member from now on. It fails when a
// live node holds that id. Start the loops with [Service.Start].
func Join(ctx context.Context, cfg Config) (*Service, error) {
	s := newService(cfg)
	start := time.Now()
	me, ok, err := s.drv.AcquireLease(ctx, NodePrefix+s.node, s.node, s.addr, s.ttl)
	if err != nil {
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("node id %q is in use by a live node", s.node)
	}
	s.me, s.lastRenew = LocalDeadline(me, start, s.ttl), time.Now()
	// Nodes started together each see only the ones that joined before their first listing: a node
	// takes leases by preference only once it listed the members again, so the first one up does
	// not take everything (and hand it over again). Work the owner needs now takes its lease at
	// once. On an exclusive database (SQLite) no other process can join.
	if !s.drv.Exclusive() {
		s.joinUntil = s.lastRenew.Add(2 * s.every)
	}
	s.nodes = []string{s.node}
	s.firstSeen[s.node] = time.Now()
	return s, nil
}

// Start watches the announcements of released leases, lists the lease table once and starts the
// scan and renewal loops.
func (s *Service) Start(ctx context.Context) {
	if lw, ok := s.drv.(driver.LeaseWatcher); ok {
		s.stopWatch = lw.WatchLeases(s.releasedElsewhere)
	}
	if err := s.list(ctx); err != nil {
		s.log.Warn("membership: list leases", "err", err)
	}
	go s.run()
	go s.renewLoop()
}

// Node returns this node's id.
func (s *Service) Node() string { return s.node }

// Addr returns where this node serves (stored with its leases).
func (s *Service) Addr() string { return s.addr }

// TTL returns the lease time.
func (s *Service) TTL() time.Duration { return s.ttl }

// Driver returns the driver holding the lease table.
func (s *Service) Driver() driver.Driver { return s.drv }

// Members returns the live members as of the last listing, sorted, this node included.
func (s *Service) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.nodes)
}

// Totals returns how many work leases this node holds now, and how many it took over from and
// handed over to other nodes so far.
func (s *Service) Totals() (held int, takeovers, handovers uint64) {
	s.mu.Lock()
	held = len(s.held)
	s.mu.Unlock()
	return held, s.takeovers.Load(), s.handovers.Load()
}

// Preferred returns the member preferred for key (this node when it knows no member).
func (s *Service) Preferred(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.preferredLocked(key)
}

// preferredLocked returns the member preferred for key. s.mu held.
func (s *Service) preferredLocked(key string) string {
	if p := Preferred(s.nodes, key); p != "" {
		return p
	}
	return s.node
}

// Preferred returns the member of nodes preferred for lease key (rendezvous hashing: the
// highest hash of node id and lease key), or "" when nodes is empty.
func Preferred(nodes []string, key string) string {
	best, bestScore := "", uint64(0)
	for i, n := range nodes {
		f := fnv.New64a()
		f.Write([]byte(n))
		f.Write([]byte{0})
		f.Write([]byte(key))
		if sc := mix64(f.Sum64()); i == 0 || sc > bestScore {
			best, bestScore = n, sc
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

// label returns the log attributes of key.
func (s *Service) label(key string) []any {
	if s.cfg.Label != nil {
		return s.cfg.Label(key)
	}
	return []any{"lease", key}
}

// isNode reports whether key is a node lease, and whose.
func isNode(key string) (string, bool) { return strings.CutPrefix(key, NodePrefix) }
