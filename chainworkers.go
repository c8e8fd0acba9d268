package foldstream

import (
	"slices"
	"sync"
	"time"
)

// Chain workers (docs/engine.md#performance).
//
// An engine's serial chain runs on a goroutine only while it has units; when the queue drains the
// goroutine ends. Started afresh for every burst, that goroutine began on a minimal stack and grew
// it, copying the stack each time, in the deep calls of reducing and validating: with thousands
// of engines opened and closed in turn (a pattern over many streams) the copying was ~8 % of the
// CPU. So a drained chain's goroutine parks for a while as an idle worker, and the next chain of
// any engine to start runs on the worker that parked last (whose stack is the one most likely
// still grown). Workers beyond maxIdleChainWorkers, or idle for chainWorkerIdle, end.

const (
	maxIdleChainWorkers = 64
	chainWorkerIdle     = 2 * time.Second
)

// chainWorkers is the process's pool of idle chain workers.
var chainWorkers workerPool

type workerPool struct {
	mu   sync.Mutex
	idle []chan func() // parked workers, the most recently parked last
	// busy counts the workers running a function or about to park or end after one.
	busy int
	// idleFor is how long a worker stays parked; zero means chainWorkerIdle.
	idleFor time.Duration
}

// run runs f on an idle worker, or on a new goroutine when none is idle.
func (p *workerPool) run(f func()) {
	p.mu.Lock()
	p.busy++
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		c <- f // buffered: the worker was removed from idle, so nobody else sends
		return
	}
	p.mu.Unlock()
	go p.work(f)
}

func (p *workerPool) work(f func()) {
	c := make(chan func(), 1)
	var t *time.Timer
	idleFor := p.idleFor
	if idleFor == 0 {
		idleFor = chainWorkerIdle
	}
	for {
		f()
		f = nil
		p.mu.Lock()
		p.busy--
		if len(p.idle) >= maxIdleChainWorkers {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		if t == nil {
			t = time.NewTimer(idleFor)
		} else {
			t.Reset(idleFor)
		}
		select {
		case f = <-c:
			t.Stop()
			continue
		case <-t.C:
		}
		p.mu.Lock()
		i := -1
		for j, d := range p.idle {
			if d == c {
				i = j
				break
			}
		}
		if i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		f = <-c // taken just as the timer fired: its sender is on the way
	}
}
