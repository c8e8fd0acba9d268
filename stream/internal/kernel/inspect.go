package kernel

import (
	"fmt"
	"time"
)

// What the tests of this package and of package stream look at inside the kernel; nothing in
// production calls it.

// TailEntryBytes caps what the tail cache keeps of one stream.
const TailEntryBytes = tailCacheBytes

// MaxCachedProducers caps the producers a stream's entry caches.
const MaxCachedProducers = maxCachedProducers

// ProducersAll reports whether m knows every producer stored for its stream.
func (m *StreamState) ProducersAll() bool { return m.producersAll }

// CachedStreams returns how many streams the writer keeps in memory. Writer only.
func (s *Store) CachedStreams() int { return s.ws.streams.len() }

// Cached reports whether the writer keeps the stream at path in memory. Writer only.
func (s *Store) Cached(path string) bool { _, ok := s.ws.streams.peek(path); return ok }

// SetGatherWait replaces the writer's bounds on waiting for the callers it answered (gather).
// Writer only.
func (s *Store) SetGatherWait(d time.Duration) { s.ws.gatherWait = d }

// ParkedWrites returns how many writes wait for a hold to end. Writer only.
func (s *Store) ParkedWrites() int { return len(s.ws.parked) }

// SetHeldBack sets the function told the path of every write held back because its stream is in
// a group whose commit is on its way. Call it before any write.
func (s *Store) SetHeldBack(fn func(path string)) { s.heldBack = fn }

// RemoteHeard returns how many streams the writer was told other processes wrote since it last
// took them; ForgetRemote drops them.
func (s *Store) RemoteHeard() int {
	s.remote.mu.Lock()
	defer s.remote.mu.Unlock()
	return len(s.remote.pending)
}

// HeardRemote reports whether the writer was told of any other process's commit.
func (s *Store) HeardRemote() bool { return s.remote.any.Load() }

// ForgetRemote drops the streams other processes wrote that the writer has not taken yet.
func (s *Store) ForgetRemote() { s.remote.take() }

// TailEntry returns what the tail cache keeps of the stream at path: its bytes, records and the
// offset its records start after.
func (s *Store) TailEntry(path string) (bytes, recs int, lo int64, ok bool) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	e := s.tails.byID[s.tails.byPath[path]]
	if e == nil {
		return 0, 0, 0, false
	}
	return e.bytes, len(e.recs), e.lo, true
}

// TailCacheConsistent checks the tail cache's byte and entry counts against its entries.
func (s *Store) TailCacheConsistent() error {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	sum := 0
	for _, e := range s.tails.byID {
		sum += e.bytes
	}
	if sum != s.tails.bytes || int64(len(s.tails.byID)) != s.tails.entries.Load() {
		return fmt.Errorf("tail cache counts %d bytes in %d entries, its entries hold %d bytes in %d",
			s.tails.bytes, s.tails.entries.Load(), sum, len(s.tails.byID))
	}
	return nil
}
