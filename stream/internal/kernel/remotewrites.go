package kernel

import (
	"sync"
	"sync/atomic"
	"time"
)

// remoteWrites collects the streams other processes sharing the database committed to, as their
// notifications arrive (Store.remoteChange), for the writer to fold into its contended streams
// (foldRemoteWrites): a write to a stream another process wrote since this node's last commit of it
// reads the row under the lock at once, instead of relying on the writer's entry, failing the
// check sent with the commit and running its whole group again (docs/postgres.md#graceful-hand-over).
// It is a hint only — the check keeps every write correct whatever it holds — so what it cannot
// keep (past maxRemoteWrites between two folds) it drops.
type remoteWrites struct {
	any     atomic.Bool
	mu      sync.Mutex
	pending map[int64]string // stream id -> path
}

// maxRemoteWrites bounds the streams remoteWrites holds between two folds.
const maxRemoteWrites = 4096

// note records that another process committed to the stream id at path.
func (r *remoteWrites) note(id int64, path string) {
	if id == 0 || path == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = make(map[int64]string)
	}
	if len(r.pending) < maxRemoteWrites {
		r.pending[id] = path
		r.any.Store(true)
	}
}

// take returns what was noted since the last take (nil: nothing).
func (r *remoteWrites) take() map[int64]string {
	if !r.any.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = nil
	r.any.Store(false)
	return p
}

// foldRemoteWrites marks as contended every stream other processes committed to since the last
// fold whose entry the writer holds (the same stream: its id), for contendedFor. Writer only.
func (s *Store) foldRemoteWrites() {
	noted := s.remote.take()
	if len(noted) == 0 {
		return
	}
	until := s.clock.Now().Add(contendedFor)
	for id, path := range noted {
		m, ok := s.ws.streams.peek(path)
		if !ok || m.Row.ID != id {
			continue
		}
		if s.ws.contended == nil {
			s.ws.contended = make(map[int64]time.Time)
		}
		s.ws.contended[id] = until
	}
}
