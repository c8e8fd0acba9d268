package membership

import (
	"context"
	"sync"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// Margin is how long before a lease's local deadline its holder stops starting work under it:
// a tenth of the lease time, at most a second. It covers the database's clock running faster
// than this node's between two renewals.
func Margin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// LocalDeadline sets l.Expires to this node's deadline for l: the driver's expiry, but never
// later than ttl after start, when the statement that acquired or renewed l was sent, on this
// process's monotonic clock. A reply that arrives late (the node froze, the network stalled)
// so extends nothing past what the database could have granted when it was asked: another node
// may take the lease over as soon as that ran out.
func LocalDeadline(l driver.Lease, start time.Time, ttl time.Duration) driver.Lease {
	left := ttl
	if d := l.Expires.Sub(start); d < left {
		left = d
	}
	l.Expires = start.Add(left) // start carries the monotonic reading, so Expires does too
	return l
}

// Acquire takes key's lease for work that starts on this node. Without force it refuses (with
// ErrNotPreferred) a free lease another member is preferred for, or any during the join delay,
// and notes the work as pending (the scans take it should its preferred node not). A lease
// another node holds fails with *ElsewhereError.
func (s *Service) Acquire(ctx context.Context, key string, force bool) (driver.Lease, error) {
	s.mu.Lock()
	if v, ok := s.view[key]; ok && v.Live && v.Holder != s.node && time.Now().Before(v.Expires) {
		s.pending[key] = true
		s.mu.Unlock()
		return driver.Lease{}, &ElsewhereError{v}
	}
	if !force && (s.preferredLocked(key) != s.node || time.Now().Before(s.joinUntil)) {
		s.pending[key] = true
		if s.joinUntil.After(time.Now()) {
			s.wakeAtLocked(s.joinUntil)
		}
		s.mu.Unlock()
		return driver.Lease{}, ErrNotPreferred
	}
	s.mu.Unlock()
	start := time.Now()
	l, ok, err := s.drv.AcquireLease(ctx, key, s.node, s.addr, s.ttl)
	if err != nil {
		return driver.Lease{}, err
	}
	l = LocalDeadline(l, start, s.ttl)
	if !ok {
		cur, err := s.Lookup(ctx, key)
		if err != nil {
			return driver.Lease{}, err
		}
		s.mu.Lock()
		s.pending[key] = true
		s.mu.Unlock()
		return driver.Lease{}, &ElsewhereError{cur}
	}
	s.mu.Lock()
	prev, seen := s.view[key]
	s.held[key], s.view[key] = l, l
	if seen && prev.Holder != "" && prev.Holder != s.node {
		s.takeovers.Add(1)
	}
	delete(s.pending, key)
	delete(s.candSince, key)
	s.mu.Unlock()
	return l, nil
}

// Lookup reads key's lease from the database and records it in what this node knows.
func (s *Service) Lookup(ctx context.Context, key string) (driver.Lease, error) {
	all, err := s.drv.Leases(ctx, driver.LeaseQuery{Keys: []string{key}})
	if err != nil {
		return driver.Lease{}, err
	}
	for _, l := range all {
		if l.Key == key {
			s.mu.Lock()
			s.view[key] = l
			s.mu.Unlock()
			return l, nil
		}
	}
	return driver.Lease{}, nil
}

// Owner returns what this node knows of key's lease: held here, or the last listing's row.
func (s *Service) Owner(key string) (driver.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.held[key]; ok {
		return l, true
	}
	l, ok := s.view[key]
	return l, ok
}

// Held returns key's lease when this node holds it.
func (s *Service) Held(key string) (driver.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.held[key]
	return l, ok
}

// Valid reports whether this node still holds key's lease at generation, by its own clock.
func (s *Service) Valid(key string, generation int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.held[key]
	return ok && l.Generation == generation && time.Now().Before(l.Expires)
}

// MayWork reports whether work may start under key's lease at generation
// (docs/reliability.md#a-node-that-freezes): nil while this node holds the lease and its local
// deadline (less the margin) has not passed on the monotonic clock. A node that froze, or whose
// renewals stalled, past that deadline starts nothing more under the lease until a renewal
// confirmed it: the renewal renews it (nobody took it over meanwhile) or finds it lost, and then
// the owner's Work.Lost stops the work. The answer is ErrLost unless the lease is confirmed (or
// ctx's error while waiting for a renewal).
func (s *Service) MayWork(ctx context.Context, key string, generation int64) error {
	held, ok, seq := s.Workable(key, generation)
	if ok {
		return nil
	}
	if !held {
		return ErrLost
	}
	s.log.Warn("membership: "+s.cfg.Noun+" lease past its local deadline; no more work under it until it is renewed",
		append(s.label(key), "generation", generation)...)
	// A renewal that failed, or whose answer came too late to count, leaves the lease neither
	// confirmed nor lost: ask again, a few times. Still unconfirmed, the node gives the work up
	// as if the lease were lost (without releasing it): once the lease ran out in the database a
	// scan takes it over — this node's or another's — and the work resumes there, so no work waits
	// for a push that may never come.
	for range confirmAttempts {
		if err := s.confirm(ctx, seq); err != nil {
			return err
		}
		held, ok, next := s.Workable(key, generation)
		if ok {
			return nil
		}
		if !held {
			break
		}
		seq = next
	}
	if held, _, _ := s.Workable(key, generation); held {
		s.unconfirmed(key, generation)
	}
	return ErrLost
}

// unconfirmed gives up key's lease at generation, which renewals could not confirm before its
// local deadline: the owner winds its work down under the database's fence (Work.Unconfirmed,
// which logs it), or, with nothing running, the service drops the lease and the owner stops what
// remains.
func (s *Service) unconfirmed(key string, generation int64) {
	if s.work.Unconfirmed(key) {
		return
	}
	s.log.Warn("membership: "+s.cfg.Noun+" lease not confirmed; stopping its work until the lease is taken again",
		append(s.label(key), "generation", generation)...)
	s.Drop(key, generation)
	s.work.Lost(key)
}

// Workable reports whether this node holds key's lease at generation (held), whether work may
// start under it now (ok: before its local deadline less the margin), and how many renewals had
// begun.
func (s *Service) Workable(key string, generation int64) (held, ok bool, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, found := s.held[key]
	held = found && l.Generation == generation
	return held, held && time.Now().Before(l.Expires.Add(-s.margin)), s.renewals
}

// confirm renews the node's leases now, unless a renewal begun after seq has ended meanwhile
// (its answer is as fresh as this one's would be).
func (s *Service) confirm(ctx context.Context, seq uint64) error {
	select {
	case s.renewing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.renewing }()
	s.mu.Lock()
	fresh := s.renewals != seq
	s.mu.Unlock()
	if fresh {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	s.renewLocked(rctx)
	return nil
}

// Drop forgets key's lease at generation without releasing it (it ran out).
func (s *Service) Drop(key string, generation int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.held[key]; ok && l.Generation == generation {
		delete(s.held, key)
	}
}

// Release gives key's lease at generation up (idle: nothing left to do, nobody takes it until
// there is; otherwise for a takeover, announced) after its work ended.
func (s *Service) Release(key string, generation int64, idle bool) {
	l, ok := s.forget(key, generation, idle)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	if err := s.drv.ReleaseLease(ctx, l, idle); err != nil {
		s.log.Warn("membership: release a "+s.cfg.Noun+" lease", append(s.label(key), "err", err)...)
	}
}

// forget drops key's lease at generation from what this node holds, as released, and returns it
// for the driver to release (false: not held at that generation).
func (s *Service) forget(key string, generation int64, idle bool) (driver.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.held[key]
	if !ok || l.Generation != generation {
		return driver.Lease{}, false
	}
	delete(s.held, key)
	if !idle && !s.drv.Exclusive() {
		s.handovers.Add(1)
	}
	v := l
	v.Live, v.Idle = false, idle
	s.view[key] = v
	return l, true
}

// renewLoop renews every quarter of the lease time, apart from the scans, so a slow scan never
// delays a renewal.
func (s *Service) renewLoop() {
	defer close(s.renewed)
	t := time.NewTicker(s.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		select {
		case s.renewing <- struct{}{}:
		case <-s.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
		s.renewLocked(ctx)
		cancel()
		<-s.renewing
	}
}

// renewLocked extends the node's leases, storing each work lease's status with it, and stops the
// work whose lease changed hands or ran out. The caller holds s.renewing: one renewal at a time.
// A renewed lease's local deadline counts from when the renewal was sent (LocalDeadline), never
// from when its answer came.
func (s *Service) renewLocked(ctx context.Context) {
	statuses := s.work.Statuses()
	s.mu.Lock()
	s.renewals++
	held := make([]driver.Lease, 0, len(s.held)+1)
	held = append(held, s.me)
	for k, l := range s.held {
		l.Status = statuses[k]
		held = append(held, l)
	}
	s.mu.Unlock()
	start := time.Now()
	renewed, err := s.drv.RenewLeases(ctx, s.node, held, s.ttl)
	var lost []string
	var unconfirmed []driver.Lease
	s.mu.Lock()
	if err != nil {
		s.log.Warn("membership: renew leases", "err", err)
		s.cutOff = true
		for _, l := range s.held {
			if start.After(l.Expires) {
				unconfirmed = append(unconfirmed, l)
			}
		}
	} else {
		s.lastRenew = start
		got := make(map[string]driver.Lease, len(renewed))
		for _, l := range renewed {
			got[l.Key] = l
		}
		if l, ok := got[s.me.Key]; ok {
			s.me = LocalDeadline(l, start, s.ttl)
		} else if !s.left {
			// The node lease lapsed and was not renewed: take it again (nobody else takes it).
			again := time.Now()
			if me, ok, err := s.drv.AcquireLease(ctx, NodePrefix+s.node, s.node, s.addr, s.ttl); err == nil && ok {
				s.me = LocalDeadline(me, again, s.ttl)
			}
		}
		for _, h := range held[1:] {
			cur, ok := s.held[h.Key]
			if !ok || cur.Generation != h.Generation {
				continue // released or re-acquired meanwhile
			}
			if l, ok := got[h.Key]; ok {
				s.held[h.Key] = LocalDeadline(l, start, s.ttl)
			} else {
				lost = append(lost, h.Key)
				delete(s.held, h.Key)
			}
		}
	}
	s.mu.Unlock()
	for _, k := range lost {
		s.log.Warn("membership: "+s.cfg.Noun+" lease lost; stopping its work", s.label(k)...)
		s.work.Lost(k)
	}
	for _, l := range unconfirmed {
		if held, _, _ := s.Workable(l.Key, l.Generation); held {
			s.unconfirmed(l.Key, l.Generation)
		}
	}
}

// Close ends the loops (the leases are left as they are: Leave gives them up).
func (s *Service) Close() {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	close(s.stop)
	<-s.done
	<-s.renewed
}

// Leaver releases a departing node's leases for a takeover, in groups (group commit): the node
// lease first, so other nodes stop preferring this one at once, with the work leases that were
// handed to it by then; each lease handed to it while a group's statement is in flight goes in the
// next group (driver.ReleaseLeases: one statement and one announcement per group on PostgreSQL).
// A node with much work leaves in a few round trips instead of one per lease, and each lease
// follows as soon as its work ended (docs/postgres.md#graceful-hand-over).
type Leaver struct {
	s       *Service
	mu      sync.Mutex
	pending []driver.Lease
	closed  bool
	kick    chan struct{}
	done    chan struct{}
}

// Leave gives the node lease up and returns the Leaver that gives up the work leases as their
// work ends; close it to wait for the last group.
func (s *Service) Leave() *Leaver {
	s.mu.Lock()
	me := s.me
	s.left = true
	s.mu.Unlock()
	lv := &Leaver{s: s, pending: []driver.Lease{me}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go lv.run()
	return lv
}

// Release hands key's lease at generation to the next group (its work ended).
func (lv *Leaver) Release(key string, generation int64) {
	l, ok := lv.s.forget(key, generation, false)
	if !ok {
		return
	}
	lv.mu.Lock()
	lv.pending = append(lv.pending, l)
	lv.mu.Unlock()
	lv.wake()
}

func (lv *Leaver) wake() {
	select {
	case lv.kick <- struct{}{}:
	default:
	}
}

func (lv *Leaver) run() {
	defer close(lv.done)
	for {
		lv.mu.Lock()
		group, closed := lv.pending, lv.closed
		lv.pending = nil
		lv.mu.Unlock()
		if len(group) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), lv.s.ttl)
			start := time.Now()
			if err := driver.ReleaseLeases(ctx, lv.s.drv, group, false); err != nil {
				lv.s.log.Warn("membership: release leases when leaving the cluster", "leases", len(group), "err", err)
			}
			lv.s.log.Debug("membership: released leases when leaving the cluster", "leases", len(group), "took", time.Since(start))
			cancel()
			continue
		}
		if closed {
			return
		}
		<-lv.kick
	}
}

// Close waits until every lease handed to the leaver is released.
func (lv *Leaver) Close() {
	lv.mu.Lock()
	lv.closed = true
	lv.mu.Unlock()
	lv.wake()
	<-lv.done
}
