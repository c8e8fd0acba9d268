package driver

import "sync"

// LeaseWatchers is the list of functions a [LeaseWatcher] driver calls on a release: a driver
// embeds one (the zero value is ready) and calls Released on each release it learns of.
type LeaseWatchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(key, holder string)
}

// WatchLeases adds fn until stop is called (see [LeaseWatcher]).
func (w *LeaseWatchers) WatchLeases(fn func(key, holder string)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(key, holder string){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, id)
	}
}

// Released calls every watcher with the released lease's key and holder.
func (w *LeaseWatchers) Released(key, holder string) {
	w.mu.Lock()
	fns := make([]func(key, holder string), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(key, holder)
	}
}
