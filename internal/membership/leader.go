package membership

import (
	"context"
	"sync"
	"time"
)

// LeaseTaker takes, renews and releases one lease by key for a holder (stream.SubscriptionStore
// is one: it keeps the lease it took, and refuses once its store closed).
type LeaseTaker interface {
	// TakeLease takes or renews lease key for holder, for ttl on the database's clock, and
	// reports whether holder has it.
	TakeLease(ctx context.Context, key, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives lease key up when holder took it last, so another node takes it at once.
	ReleaseLease(ctx context.Context, key, holder string) error
}

// LeaderConfig configures a Leader.
type LeaderConfig struct {
	// Taker holds the lease.
	Taker LeaseTaker
	// Key names the lease; Holder is this node.
	Key, Holder string
	// TTL is how long the lease lasts unless renewed; the holder renews it every third of it.
	TTL time.Duration
	// Now reads the local monotonic clock the lease's local deadline is checked against.
	// Defaults to time.Now.
	Now func() time.Time
	// Exclusive: the database is a file only this process opens, so nobody else can take the
	// lease over and the deadline is not checked.
	Exclusive bool
}

// Leader is the lease of work one node of the cluster does at a time ("one node does this"): the
// node that holds it leads. Like a Service's leases, it keeps a local deadline on the monotonic
// clock, counted from when the take or renewal was sent (docs/reliability.md#a-node-that-freezes):
// work runs only before it, so a node woken from a freeze past it does nothing more until it
// renewed the lease, although another node may have taken it over meanwhile. Its owner's loop
// calls Take when Next is due, checks Holds before each piece of work, and calls Release when it
// has nothing to do or stops. Safe for concurrent use.
type Leader struct {
	cfg LeaderConfig

	mu sync.Mutex
	// deadline is when the lease runs out by the local clock (zero: not held); lapsed: the
	// deadline passed and Holds said so (once per lapse).
	deadline time.Time
	lapsed   bool
	next     time.Time // when the lease is due for a renewal, on the owner's clock
}

// NewLeader returns the leader lease cfg describes, not held yet.
func NewLeader(cfg LeaderConfig) *Leader {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Leader{cfg: cfg}
}

// Take takes or renews the lease at now on the owner's clock (the next renewal is due a third of
// the lease time later) and reports whether this node holds it. The local deadline is the lease
// time after the statement was sent, on the monotonic clock: the store answers no expiry, so this
// is LocalDeadline with the full lease time.
func (l *Leader) Take(ctx context.Context, now time.Time) (bool, error) {
	sent := l.cfg.Now()
	ok, err := l.cfg.Taker.TakeLease(ctx, l.cfg.Key, l.cfg.Holder, l.cfg.TTL)
	l.mu.Lock()
	if ok && err == nil {
		l.deadline, l.lapsed = sent.Add(l.cfg.TTL), false
	} else {
		l.deadline = time.Time{}
	}
	l.next = now.Add(l.cfg.TTL / 3)
	l.mu.Unlock()
	return ok && err == nil, err
}

// Next returns when the lease is due for a take or renewal, on the owner's clock (zero at first).
func (l *Leader) Next() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Holds reports whether the lease is this node's by its local deadline; lapsedNow is true the
// first time it is not after a deadline passed (for the owner to log once per lapse).
func (l *Leader) Holds() (ok, lapsedNow bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.Exclusive || l.cfg.Now().Before(l.deadline) {
		return true, false
	}
	if !l.lapsed && !l.deadline.IsZero() {
		l.lapsed = true
		return false, true
	}
	return false, false
}

// Release gives the lease up: no work runs under it from now on, and another node takes it at
// once.
func (l *Leader) Release(ctx context.Context) error {
	l.mu.Lock()
	l.deadline = time.Time{}
	l.mu.Unlock()
	return l.cfg.Taker.ReleaseLease(ctx, l.cfg.Key, l.cfg.Holder)
}
