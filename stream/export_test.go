package stream

import (
	"context"
	"time"
)

// CachedStreams returns how many streams the writer keeps in memory (read on the writer).
func CachedStreams(s *Store) int {
	n := 0
	_ = s.write(context.Background(), func(t *tx) error {
		n = t.s.ws.streams.len()
		return nil
	})
	return n
}

// SetGatherWait replaces the writer's bounds on waiting for the callers it answered (gather).
func SetGatherWait(s *Store, d time.Duration) {
	_ = s.write(context.Background(), func(t *tx) error {
		t.s.ws.gatherWait = d
		return nil
	})
}
