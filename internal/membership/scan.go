package membership

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// Rescan asks the loop for a full scan now (notifications may have been missed).
func (s *Service) Rescan() {
	s.mu.Lock()
	s.scanNow = true
	s.mu.Unlock()
	s.wake()
}

// wakeAtLocked asks for a full scan at t (the end of a join period), once per period. s.mu held.
func (s *Service) wakeAtLocked(t time.Time) {
	if s.joinScan.Before(t) {
		s.joinScan = t
		time.AfterFunc(time.Until(t), s.Rescan)
	}
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// releasedElsewhere is the driver's notice of a lease released by another holder for a takeover
// (a node stopping or handing work over): the loop looks at it now. A member's node lease asks
// for a full scan (the members changed). It never blocks.
func (s *Service) releasedElsewhere(key, holder string) {
	if holder == s.node {
		return
	}
	if id, ok := isNode(key); ok {
		// The member left: it is preferred for nothing from now on, so the leases it releases
		// with or after its node lease are taken by their next preferred node at once, before
		// the scan that lists the members again.
		s.mu.Lock()
		if i := slices.Index(s.nodes, id); i >= 0 && id != s.node {
			s.nodes = slices.Delete(slices.Clone(s.nodes), i, i+1)
		}
		s.mu.Unlock()
		s.Rescan()
		return
	}
	if !strings.HasPrefix(key, s.cfg.Prefix) {
		return
	}
	s.mu.Lock()
	if v, ok := s.view[key]; ok && v.Holder == holder {
		v.Live = false
		s.view[key] = v
	}
	if len(s.freed) < maxFreePerScan {
		s.freed = append(s.freed, key)
	} else {
		s.scanNow = true // too many at once: the scan finds them
	}
	s.mu.Unlock()
	s.wake()
}

// TakeFreed returns which of the announced free leases keys this node takes over: those p would
// take that this node is preferred for; the others are left to their preferred node (and to the
// scans, should it not take them). The caller holds the lock p reads under.
func (s *Service) TakeFreed(p Planner, keys []string) (take []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if _, mine := s.held[k]; mine || !p.Takeable(k) {
			continue
		}
		if s.preferredLocked(k) == s.node {
			take = append(take, k)
		}
	}
	return take
}

func (s *Service) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	var last time.Time
	for {
		kicked := false
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
			kicked = true
		}
		s.mu.Lock()
		freed, full := s.freed, s.scanNow || !kicked
		s.freed, s.scanNow = nil, false
		s.mu.Unlock()
		if len(freed) > 0 {
			s.work.Freed(freed)
		}
		if full {
			if kicked {
				// Out of turn (members changed): at most one such scan per kickGap.
				if wait := kickGap - time.Since(last); wait > 0 {
					select {
					case <-s.stop:
						return
					case <-time.After(wait):
					}
				}
			}
			last = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
			s.tick(ctx)
			cancel()
		}
	}
}

// tick is one scan: list, then the owner takes over and hands over what Plan decides.
func (s *Service) tick(ctx context.Context) {
	if err := s.list(ctx); err != nil {
		s.log.Warn("membership: list leases", "err", err)
	}
	s.work.Scan()
}

// list reads the bounded part of the lease table a scan needs, in one round trip: the live
// members, the next page of leases waiting for a taker, and which of the leases this node has
// work for (pending work, what the owner wants) are live. The view keeps what it learnt of
// other holders' live leases (from these reads and from lookups) until they expire by their
// last known expiry; a lease announced released drops out at once.
func (s *Service) list(ctx context.Context) error {
	keys := s.work.Wanted(maxKeysPerScan)
	s.mu.Lock()
	after := s.freeAfter
	for k := range s.pending {
		if len(keys) >= maxKeysPerScan {
			break
		}
		keys = append(keys, k)
	}
	s.mu.Unlock()
	qs := []driver.LeaseQuery{
		{Prefix: NodePrefix, Live: true},
		{Prefix: s.cfg.Prefix, Free: true, After: after, Limit: maxFreePerScan},
	}
	if len(keys) > 0 {
		qs = append(qs, driver.LeaseQuery{Prefix: s.cfg.Prefix, Keys: keys, Live: true})
	}
	all, err := s.drv.Leases(ctx, qs...)
	if err != nil {
		s.mu.Lock()
		s.cutOff = true
		s.mu.Unlock()
		return err
	}
	now := time.Now()
	nodes := []string{s.node}
	found := map[string]driver.Lease{}
	free, lastFree := 0, ""
	for _, l := range all {
		if id, ok := isNode(l.Key); ok {
			if l.Live && id != s.node {
				nodes = append(nodes, id)
			}
			continue
		}
		if !strings.HasPrefix(l.Key, s.cfg.Prefix) {
			continue
		}
		if !l.Live {
			free++
			lastFree = l.Key
		}
		found[l.Key] = l
	}
	sort.Strings(nodes)
	nodes = slices.Compact(nodes)
	s.mu.Lock()
	defer s.mu.Unlock()
	if free >= maxFreePerScan {
		s.freeAfter = lastFree // more wait beyond this page: the next scan reads them
	} else {
		s.freeAfter = ""
	}
	view := make(map[string]driver.Lease, len(s.held)+len(found))
	for k, l := range s.view {
		if l.Live && l.Holder != s.node && now.Before(l.Expires) {
			view[k] = l // another holder's, still live by its last known expiry
		}
	}
	for k, l := range found {
		view[k] = l
	}
	for k, l := range s.held {
		view[k] = l // what this node holds, as it knows it (the listing may predate a renewal)
	}
	s.view = view
	seen := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		if t, ok := s.firstSeen[n]; ok {
			seen[n] = t
		} else {
			seen[n] = now
		}
	}
	s.nodes, s.firstSeen = nodes, seen
	if s.cutOff {
		s.rejoinLocked(now)
	}
	return nil
}

// rejoinLocked starts a join period of one lease time at now, after the database did not answer
// this node for a while (s.cutOff). When it did not answer the others either — it restarted, or
// failed over — every node's leases lapsed meanwhile, the node leases included, and the first node
// to list the table again would find itself the only member and take every lapsed lease, which
// their holders would have renewed a moment later; the leases would then move back by hand-overs.
// Each move runs the work in flight at it again. So a node cut off takes no lease by preference for
// one lease time, in which every live node renews (four times a lease time), and takes over only
// what is still lapsed after it. A node alone cut off finds the others' leases live and loses
// nothing by waiting. s.mu held.
func (s *Service) rejoinLocked(now time.Time) {
	s.cutOff = false
	if s.drv.Exclusive() {
		return
	}
	until := now.Add(s.ttl)
	if until.After(s.joinUntil) {
		s.joinUntil = until
		s.log.Info("membership: the database answers again; taking no lease over for a lease time while the members renew theirs",
			"for", s.ttl)
		s.wakeAtLocked(until)
	}
}

// Plan decides which free leases this node takes over and which held ones it hands to the
// preferred node, from the last listing and p's answers. The caller holds the lock p reads
// under.
func (s *Service) Plan(p Planner) (take, give []string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cands := map[string]bool{}
	for k, l := range s.view {
		if _, mine := s.held[k]; mine || l.Live {
			continue
		}
		ok, pinned := p.Runnable(k)
		if !ok {
			continue
		}
		if !l.Idle || s.pending[k] || pinned {
			cands[k] = true
		}
	}
	for k := range s.pending {
		l, ok := s.view[k]
		switch {
		case ok && l.Live:
			delete(s.pending, k) // its holder runs it
		case func() bool { ok, _ := p.Runnable(k); return ok }():
			cands[k] = true
		default:
			delete(s.pending, k)
		}
	}
	for _, k := range p.Required() {
		if l, ok := s.view[k]; !ok || !l.Live {
			cands[k] = true
		}
	}
	for k := range s.candSince {
		if !cands[k] {
			delete(s.candSince, k)
		}
	}
	if now.Before(s.joinUntil) {
		// Still learning the members: nothing is taken by preference yet (work the owner needs
		// now takes its lease at once); the scan at joinUntil takes this node's share.
		return nil, nil
	}
	for k := range cands {
		if s.preferredLocked(k) == s.node {
			take = append(take, k)
			continue
		}
		since, ok := s.candSince[k]
		if !ok {
			s.candSince[k] = now
		} else if now.Sub(since) >= 4*s.every {
			take = append(take, k) // the preferred node left it free: run it here
		}
	}
	for k := range s.held {
		if len(give) >= maxHandoffsPerScan {
			break
		}
		pref := s.preferredLocked(k)
		if pref == s.node || now.Sub(s.firstSeen[pref]) < 2*s.every {
			continue
		}
		if p.Handable(k) {
			give = append(give, k)
		}
	}
	return take, give
}
