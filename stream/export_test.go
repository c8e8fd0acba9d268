package stream

import (
	"context"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"time"
)

// CachedStreams returns how many streams the writer keeps in memory (read on the writer).
func CachedStreams(s *Store) int {
	n := 0
	_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
		n = s.k.CachedStreams()
		return nil
	})
	return n
}

// SetGatherWait replaces the writer's bounds on waiting for the callers it answered (gather).
func SetGatherWait(s *Store, d time.Duration) {
	_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
		s.k.SetGatherWait(d)
		return nil
	})
}

// AccessEntries returns how many streams the protocol view holds an in-memory access time for,
// and, when sweepAt > 0, sets the size at which noteAccess sweeps (and its floor) to sweepAt.
func AccessEntries(s *Store, sweepAt int) int {
	p := s.proto()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sweepAt > 0 {
		p.sweepAt, p.sweepMin = sweepAt, sweepAt
	}
	return len(p.access)
}
