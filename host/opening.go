package host

import (
	"errors"
	"strings"
)

// Opening engines for work the store's commits announce: a commit on a stream a pattern covers
// queues its engine's opening, which a bounded set of openers runs.

// committed is the store's commit watch: a commit on a stream a pattern covers opens that
// processor's engine there when it is closed. It runs on the store's writer goroutine and only
// queues work.
func (h *Host) committed(path string) {
	if path == "" {
		h.leases.rescan() // notifications may have been missed
		h.retryStoreFailures()
		return
	}
	if !h.hasPatterns.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return
	}
	for _, reg := range h.patterns {
		if !strings.HasPrefix(path, reg.pattern.Prefix()) || !reg.pattern.Match(path) {
			continue
		}
		key := procKey{path, reg.slug}
		if h.exact[key] != nil {
			continue
		}
		sl := h.slots[key]
		switch {
		case sl == nil:
			h.queueOpenLocked(key)
		case sl.state == slotClosing || sl.settling:
			sl.dirty = true
		}
	}
}

// openWorkers is how many goroutines open queued engines at once, on an exclusive database
// (SQLite) or a shared one.
//
// On SQLite an engine opened to work makes one write through the store's writer (the stream's
// wake record and the opening read, Events.ReadOpening with Wake) and waits for its group's
// commit: an opening's time is mostly that wait, and any number of openings share one commit and
// its fsync. With 8 workers, 8 openings shared each commit round: folding over 100,000 streams,
// where every batch opens an engine, the openings bounded the rate (the process used about two
// thirds of one core of two) and each cold batch paid a quarter of a commit; with 32, a group
// carries the openings queued meanwhile (docs/bench.md, the pattern fold). On a shared database an
// opening reads and takes its lease over its own connection, so the workers stay few.
func openWorkers(exclusive bool) int {
	if exclusive {
		return 32
	}
	return 8
}

// queueOpenLocked queues key to be opened by a worker. h.mu held.
func (h *Host) queueOpenLocked(key procKey) {
	if h.opening[key] {
		return
	}
	h.opening[key] = true
	h.openQ = append(h.openQ, key)
	if h.openers < h.maxOpeners {
		h.openers++
		h.wg.Add(1)
		go h.runOpener()
	}
}

func (h *Host) runOpener() {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		if len(h.openQ) == 0 || h.shutdown {
			h.openers--
			h.mu.Unlock()
			return
		}
		key := h.openQ[0]
		h.openQ[0] = procKey{}
		h.openQ = h.openQ[1:]
		delete(h.opening, key)
		reg := h.registrationFor(key.path, key.slug)
		if reg == nil || reg.pinned() || h.slots[key] != nil {
			if sl := h.slots[key]; sl != nil && sl.state == slotClosing {
				sl.dirty = true
			}
			h.mu.Unlock()
			continue
		}
		sl := newSlot(key, reg)
		h.slots[key] = sl
		h.mu.Unlock()
		h.open(sl, openForWork, true)
		if err := sl.openErr; err != nil && !errors.Is(err, ErrShutdown) && !isElsewhere(err) {
			h.log.Warn("host: opening an engine failed", "path", key.path, "slug", key.slug, "err", err)
		}
	}
}
