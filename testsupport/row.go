package testsupport

import (
	"context"
	"sync"

	"github.com/foldstream/foldstream"
)

type rowPush struct {
	events []foldstream.Event
	r      foldstream.ScannedRange
}

// PushedByARow models a real subscription row pushing eng from mem (spec §15 pushedByARow): only
// commits containing an event consumes accepts ([foldstream.ConsumesEvent]) are pushed, carrying
// only those events, over (the row's last delivered through — or the commit's after the first
// time — , the commit's through]. One push is in flight at a time; later ones queue behind it and
// are handed to the engine only when it is their turn. The returned function unsubscribes.
func PushedByARow(mem *MemoryStream, eng foldstream.Runner, consumes []string) (unsubscribe func()) {
	row := &row{mem: mem, eng: eng, consumes: consumes}
	stopWait := mem.WaitFor(eng)
	remove := mem.OnCommit(row.onCommit)
	return func() {
		remove()
		row.mu.Lock()
		row.stopped = true
		row.queue = nil
		row.mu.Unlock()
		stopWait()
	}
}

type row struct {
	mem      *MemoryStream
	eng      foldstream.Runner
	consumes []string

	mu          sync.Mutex
	lastThrough int64
	delivered   bool
	queue       []rowPush
	busy        bool
	stopped     bool
}

func (w *row) onCommit(events []foldstream.Event, r foldstream.ScannedRange) {
	var mine []foldstream.Event
	for _, ev := range events {
		if foldstream.ConsumesEvent(w.consumes, ev) {
			mine = append(mine, ev)
		}
	}
	if len(mine) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.queue = append(w.queue, rowPush{events: mine, r: r})
	if !w.busy {
		w.busy = true
		w.dispatchLocked()
	}
}

func (w *row) dispatchLocked() {
	p := w.queue[0]
	w.queue = w.queue[1:]
	rng := p.r
	if w.delivered {
		rng.After = w.lastThrough
	}
	w.mem.begin()
	var wait func(context.Context) error
	if q, ok := w.eng.(foldstream.BatchQueuer); ok {
		wait = q.QueueEventBatch(context.Background(), p.events, rng)
	} else {
		wait = func(ctx context.Context) error { return w.eng.ProcessEventBatch(ctx, p.events, rng) }
	}
	go func() {
		defer w.mem.end()
		err := wait(context.Background())
		w.mu.Lock()
		defer w.mu.Unlock()
		if err == nil {
			w.lastThrough, w.delivered = rng.Through, true
		}
		if len(w.queue) > 0 && !w.stopped {
			w.dispatchLocked()
			return
		}
		w.busy = false
	}()
}
