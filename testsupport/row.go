package testsupport

import (
	"context"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
)

// PushedByARow models a real subscription row pushing eng from mem (docs/engine.md#test-support):
// only commits containing an event consumes accepts ([foldtype.ConsumesEvent]) are pushed,
// carrying only those events, over (the row's previous through — or the commit's after the first
// time —, the commit's through]. The returned function unsubscribes.
//
// Pushes are handed to the engine in commit order at commit time and run one at a time behind each
// other on the engine's serial chain. (Holding a later push back until the one in flight finished
// would let a snapshot taken straight after a commit miss a push the row already owes; handing the
// push over at once makes the engine see the owed head, as a host does for the pushes it owes.)
func PushedByARow(mem *MemoryStream, eng foldtype.Runner, consumes []string) (unsubscribe func()) {
	row := &row{mem: mem, eng: eng, consumes: consumes}
	stopWait := mem.WaitFor(eng)
	remove := mem.OnCommit(row.onCommit)
	return func() {
		remove()
		row.mu.Lock()
		row.stopped = true
		row.mu.Unlock()
		stopWait()
	}
}

type row struct {
	mem      *MemoryStream
	eng      foldtype.Runner
	consumes []string

	mu          sync.Mutex
	lastThrough int64
	delivered   bool
	stopped     bool
}

func (w *row) onCommit(events []foldtype.Event, r foldtype.ScannedRange) {
	var mine []foldtype.Event
	for _, ev := range events {
		if foldtype.ConsumesEvent(w.consumes, ev) {
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
	rng := r
	if w.delivered {
		rng.After = w.lastThrough
	}
	w.lastThrough, w.delivered = rng.Through, true
	w.mem.begin()
	var wait func(context.Context) error
	if q, ok := w.eng.(batchQueuer); ok {
		wait = q.QueueEventBatch(context.Background(), mine, rng)
	} else {
		wait = func(ctx context.Context) error { return w.eng.ProcessEventBatch(ctx, mine, rng) }
	}
	go func() {
		defer w.mem.end()
		_ = wait(context.Background())
	}()
}
