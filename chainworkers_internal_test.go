package foldstream

import (
	"sync"
	"testing"
)

func idleWorkers(p *workerPool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func TestChainWorkersParkBoundedAndRunTheNextChain(t *testing.T) {
	var p workerPool
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
	for idleWorkers(&p) < maxIdleChainWorkers {
		ran := make(chan struct{})
		p.run(func() { close(ran) }) // settles once every worker parked or ended
		<-ran
	}
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
