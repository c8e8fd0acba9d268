package stream

import (
	"log/slog"
	"sync"

	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Listing streams and learning of new ones: what a host needs to run a processor on every stream
// matching a pattern, and what a console needs to show the streams.

// createdListeners are the functions registered with OnStreamCreated.
type createdListeners struct {
	mu sync.Mutex
	ls map[*createdListener]struct{}
}

// createdListener delivers creation notices to one function, in commit order, on its own
// goroutine: the writer only queues the path, so a slow or blocking function never holds up
// writes, and the function may call the store.
type createdListener struct {
	fn      func(path string)
	mu      sync.Mutex
	queue   []string
	stopped bool
	wake    chan struct{} // buffered (1): the queue is not empty
	stop    chan struct{}
}

// OnStreamCreated registers fn to be called with the path of every stream created from now on, by
// either view: the event view's first append to a missing path, and a protocol create (a PUT, a
// fork). A path deleted and created again is reported again. Each call comes after the creating
// commit, on a goroutine of the listener's own, one at a time and in commit order; the notice is
// queued before the creating call returns. fn may call the store. A panic in fn is recovered and
// logged, and later notices are still delivered.
//
// To learn of every stream without a gap, register first, then list existing streams with
// ListStreams: a stream created in between is then both listed and reported, never missed.
// The returned stop ends the notices (a call already running finishes); Close ends them too.
func (e *Events) OnStreamCreated(fn func(path string)) (stop func()) {
	s := e.s
	l := &createdListener{fn: fn, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	s.created.mu.Lock()
	if s.created.ls == nil {
		s.created.ls = make(map[*createdListener]struct{})
	}
	s.created.ls[l] = struct{}{}
	s.created.mu.Unlock()
	if !s.pushes.Go(func() { s.runCreatedListener(l) }) { // none starts once Close began
		s.dropCreatedListener(l)
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { s.dropCreatedListener(l) }) }
}

func (s *Store) dropCreatedListener(l *createdListener) {
	s.created.mu.Lock()
	delete(s.created.ls, l)
	s.created.mu.Unlock()
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.stop)
	}
	l.mu.Unlock()
}

func (s *Store) runCreatedListener(l *createdListener) {
	for {
		select {
		case <-l.wake:
		case <-l.stop:
			return
		case <-s.k.Stopping():
			return
		}
		for {
			l.mu.Lock()
			if l.stopped || len(l.queue) == 0 {
				l.mu.Unlock()
				break
			}
			path := l.queue[0]
			l.queue = l.queue[1:]
			l.mu.Unlock()
			s.callCreated(l.fn, path)
		}
	}
}

// callCreated runs one notice, recovering a panic so one faulty listener cannot take the process
// down.
func (s *Store) callCreated(fn func(string), path string) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("stream store: stream-created listener panicked", slog.String("path", path), slog.Any("panic", p))
		}
	}()
	fn(path)
}

// streamCreated queues a creation notice for every listener once tx commits.
func (s *Store) streamCreated(t *kernel.Tx, path string) {
	t.AfterCommit(func() {
		s.created.mu.Lock()
		defer s.created.mu.Unlock()
		for l := range s.created.ls {
			l.mu.Lock()
			l.queue = append(l.queue, path)
			l.mu.Unlock()
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
	})
}
