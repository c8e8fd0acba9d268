package kernel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// DefaultCommitStallAfter is how long a COMMIT may be on its way before the store reports its
// commits stalled (Config.CommitStallAfter).
const DefaultCommitStallAfter = 2 * time.Second

// commitHealth tracks whether the store's commits flow (docs/store.md#commit-stalls): they stall
// when a COMMIT fails because the database cannot be reached or did not confirm it, or when one
// has been on its way longer than Config.CommitStallAfter. They flow again at the next commit that
// succeeds: a write's, or the probe's that runs meanwhile (driver.CommitProber).
type commitHealth struct {
	mu      sync.Mutex
	onWay   map[*building]time.Time // commits on their way, by when they were sent
	stalled bool
	cause   string
	probing bool
}

// commitSent notes b's COMMIT going out.
func (s *Store) commitSent(b *building, at time.Time) {
	h := &s.health
	h.mu.Lock()
	if h.onWay == nil {
		h.onWay = make(map[*building]time.Time)
	}
	h.onWay[b] = at
	h.mu.Unlock()
}

// commitDone notes b's COMMIT answered with err.
func (s *Store) commitDone(b *building, err error) {
	h := &s.health
	h.mu.Lock()
	delete(h.onWay, b)
	h.mu.Unlock()
	switch {
	case err == nil:
		s.commitsFlow()
	case stallError(err):
		s.commitsStall("a commit failed: " + err.Error())
	}
}

// stallError reports a commit failure that says the database cannot take commits now (as opposed
// to a refused write).
func stallError(err error) bool {
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		return false
	}
	switch fe.Code {
	case foldtype.CodeUnavailable:
		// A write that collided with another node's is refused for a retry: the database
		// answered, so nothing stalls.
		return fe.Data["reason"] != driver.ReasonCollision
	case foldtype.CodeCommitOutcomeUnknown:
		return true
	}
	return false
}

// commitsStall marks the commits stalled for cause, logging it once, and starts the probe.
func (s *Store) commitsStall(cause string) {
	h := &s.health
	h.mu.Lock()
	was := h.stalled
	h.stalled, h.cause = true, cause
	probe := !h.probing
	if s.caps.CommitProber == nil || s.closed.Load() {
		probe = false
	}
	h.probing = h.probing || probe
	h.mu.Unlock()
	if !was {
		s.log.Warn("commits stall: the node reports itself not ready until a commit succeeds", "cause", cause)
	}
	if probe {
		// Not counted in bgWG: it may start while Close waits there. It ends at s.stop, and a
		// probe on a closed driver fails at once.
		go s.probeCommits()
	}
}

// commitsFlow marks the commits flowing again.
func (s *Store) commitsFlow() {
	h := &s.health
	h.mu.Lock()
	was := h.stalled
	h.stalled, h.cause = false, ""
	h.mu.Unlock()
	if was {
		s.log.Info("commits flow again: the node is ready")
	}
}

// CommitsStalled reports whether the store's commits stall, and why: the last commit failed
// because the database cannot be reached or did not confirm it, or a commit has been on its way
// longer than Config.CommitStallAfter. It reports false again once a commit succeeds; while
// stalled, a probe commits nothing every second on drivers that can (driver.CommitProber), so the
// store finds out by itself when it may write again. /readyz answers 503 while this is true.
func (s *Store) CommitsStalled() (bool, string) {
	h := &s.health
	h.mu.Lock()
	stalled, cause := h.stalled, h.cause
	var oldest time.Time
	for _, at := range h.onWay {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	h.mu.Unlock()
	if stalled {
		return true, cause
	}
	if !oldest.IsZero() {
		if waited := time.Since(oldest); waited > s.opts.CommitStallAfter {
			cause = fmt.Sprintf("a commit has waited %v for the database", waited.Round(time.Millisecond))
			s.commitsStall(cause)
			return true, cause
		}
	}
	return false, ""
}

// probeCommits commits nothing, once a second, until a commit succeeds or the store closes.
func (s *Store) probeCommits() {
	defer func() {
		s.health.mu.Lock()
		s.health.probing = false
		s.health.mu.Unlock()
	}()
	p := s.caps.CommitProber
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.health.mu.Lock()
		stalled := s.health.stalled
		s.health.mu.Unlock()
		if !stalled {
			return
		}
		ctx, cancel := s.UntilClose()
		err := p.ProbeCommit(ctx)
		cancel()
		if err == nil {
			s.commitsFlow()
			return
		}
		if errors.Is(err, context.Canceled) {
			return
		}
		s.log.Debug("commit probe failed", "err", err)
	}
}
