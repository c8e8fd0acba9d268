package protocol

import (
	"sync"
	"time"
)

// Producer requests in flight (docs/store.md#idempotent-producers).
//
// A producer pipelines its requests, and on the way through the HTTP server seq N+1 can reach the
// writer before seq N (its body was read faster, its goroutine ran first). AppendRecord then waits
// for the missing seqs instead of answering a gap at once. How long is decided here: while a
// missing seq is known to be arriving — its request's headers were read by this process and it has
// not been answered yet — the wait goes on (up to maxArrivingWait); once none is, a gap that is
// still there after Config.ProducerReorderWait is answered. A lost request thus costs the short
// wait, and a slow one (a busy machine, a large body still being read) no 409 at all.

// maxArrivingWait caps how long an append waits for a missing seq that is still arriving.
const maxArrivingWait = 30 * time.Second

// maxArrivingScan caps how many missing seqs are looked up: a gap wider than any pipeline is a
// real gap.
const maxArrivingScan = 64

type arrivingKey struct {
	path, id   string
	epoch, seq int64
}

type arrivals struct {
	mu sync.Mutex
	n  map[arrivingKey]int
}

// ProducerArriving notes that a producer request for seq of producer id (epoch) on the stream at
// path is arriving: its headers were read, its body and its append are to come. Call the returned
// function once it was answered. The HTTP server calls it before reading a producer POST's body.
func (p *Protocol) ProducerArriving(path, id string, epoch, seq int64) (done func()) {
	k := arrivingKey{path, id, epoch, seq}
	a := &p.arriving
	a.mu.Lock()
	if a.n == nil {
		a.n = make(map[arrivingKey]int)
	}
	a.n[k]++
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			if a.n[k]--; a.n[k] <= 0 {
				delete(a.n, k)
			}
			a.mu.Unlock()
		})
	}
}

// anyArriving reports whether one of the seqs [from, to) of the producer is arriving.
func (p *Protocol) anyArriving(path, id string, epoch, from, to int64) bool {
	a := &p.arriving
	a.mu.Lock()
	defer a.mu.Unlock()
	for seq := from; seq < to && seq < from+maxArrivingScan; seq++ {
		if a.n[arrivingKey{path, id, epoch, seq}] > 0 {
			return true
		}
	}
	return false
}
