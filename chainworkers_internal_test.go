package foldstream

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func idleWorkers(p *workerPool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// settleWorkers waits until every worker has parked or ended after its function.
func settleWorkers(p *workerPool) {
	for {
		p.mu.Lock()
		busy := p.busy
		p.mu.Unlock()
		if busy == 0 {
			return
		}
		runtime.Gosched()
	}
}

func TestChainWorkersParkBoundedAndRunTheNextChain(t *testing.T) {
	p := workerPool{idleFor: time.Hour} // no worker ends of idleness while the test runs
	const n = 2 * maxIdleChainWorkers
	release := make(chan struct{})
	var started, ended sync.WaitGroup
	started.Add(n)
	ended.Add(n)
	for range n {
		p.run(func() {
			started.Done()
			<-release
			ended.Done()
		})
	}
	started.Wait() // n chains at once: n goroutines
	close(release)
	ended.Wait()
	settleWorkers(&p) // each of the n parked, up to the cap, or ended
	if got := idleWorkers(&p); got != maxIdleChainWorkers {
		t.Fatalf("idle workers = %d, want the cap %d", got, maxIdleChainWorkers)
	}
	// The next chain runs on a parked worker: while it runs, one fewer is idle.
	inside := make(chan int)
	p.run(func() { inside <- idleWorkers(&p) })
	if got := <-inside; got != maxIdleChainWorkers-1 {
		t.Fatalf("idle workers while a chain runs = %d, want %d (a parked worker runs it)", got, maxIdleChainWorkers-1)
	}
}
