package host_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
)

// reaction is when and on which node a processor saw an event.
type reaction struct {
	at   time.Time
	node int
}

// reactions collects the first ProcessEvent of every (path, offset) across the nodes' processors.
type reactions struct {
	mu    sync.Mutex
	seen  map[string]reaction
	waits map[string]chan reaction
}

func newReactions() *reactions {
	return &reactions{seen: map[string]reaction{}, waits: map[string]chan reaction{}}
}

func (r *reactions) record(key string, node int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[key]; ok {
		return // a replay after a lease moved; the first sighting counts
	}
	re := reaction{now, node}
	r.seen[key] = re
	if w, ok := r.waits[key]; ok {
		w <- re
		delete(r.waits, key)
	}
}

// wait returns the first sighting of key, or false after timeout.
func (r *reactions) wait(key string, timeout time.Duration) (reaction, bool) {
	r.mu.Lock()
	if re, ok := r.seen[key]; ok {
		r.mu.Unlock()
		return re, true
	}
	w := make(chan reaction, 1)
	r.waits[key] = w
	r.mu.Unlock()
	select {
	case re := <-w:
		return re, true
	case <-time.After(timeout):
		return reaction{}, false
	}
}

// reactor is a pattern processor that records when its node saw each event.
type reactor struct {
	foldstream.Base[cart]
	node int
	log  *reactions
}

func (p *reactor) Reduce(a foldstream.ReduceArgs[cart]) (cart, bool, error) {
	return cart{Items: a.State.Items + 1}, true, nil
}

func (p *reactor) ProcessEvent(a *foldstream.ProcessEventArgs[cart]) error {
	if a.Event != nil {
		p.log.record(fmt.Sprintf("%s@%d", a.Event.Path, a.Event.Offset), p.node)
	}
	return nil
}

// reactionCluster is n hosts, each on its own store, all running one pattern registration.
type reactionCluster struct {
	stores []*stream.Store
	log    *reactions
	owner  map[string]int // the node last seen running each stream's processor
}

const reactionStreams = 20

func startReactionCluster(b *testing.B, open func() *stream.Store, n int) *reactionCluster {
	b.Helper()
	ctx := context.Background()
	c := &reactionCluster{log: newReactions(), owner: map[string]int{}}
	contract, err := foldstream.DefineContract(foldstream.ContractConfig[cart]{Slug: "reactor", Version: "1", Consumes: []string{"r"}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		s := open()
		h, err := host.New(s, host.Config{Logger: quietLog, NodeID: fmt.Sprintf("n%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = h.Shutdown(context.Background())
			_ = s.Close(context.Background())
		})
		if err := host.RegisterPattern[cart](ctx, h, "/r/*", &reactor{Base: foldstream.NewBase(contract), node: i, log: c.log}); err != nil {
			b.Fatal(err)
		}
		c.stores = append(c.stores, s)
	}
	// One event per stream through node 0 opens each stream's engine on the node that wins its
	// lease; the benchmark then knows every stream's owner.
	for k := range reactionStreams {
		path := fmt.Sprintf("/r/%d", k)
		re := c.appendAndWait(b, 0, path)
		c.owner[path] = re.node
	}
	// Nodes that started together see each other only at their lease scans: until then a node
	// may take streams another is preferred for, and hands them over afterwards (a join,
	// docs/postgres.md#processors-and-leases). Measure once nothing moved for 2 s (four scans).
	quiet := time.Now()
	if n > 1 && !wait.Every(30*time.Second, 100*time.Millisecond, func() bool { // let the lease scans run
		for k := range reactionStreams {
			path := fmt.Sprintf("/r/%d", k)
			if re := c.appendAndWait(b, k%n, path); re.node != c.owner[path] {
				c.owner[path] = re.node
				quiet = time.Now()
			}
		}
		return time.Since(quiet) >= 2*time.Second
	}) {
		b.Fatalf("processors still moving between nodes after 30 s")
	}
	per := make([]int, n)
	for _, o := range c.owner {
		per[o]++
	}
	b.Logf("streams per node: %v", per)
	return c
}

// appendAndWait appends one event to path through node via and returns its first sighting.
func (c *reactionCluster) appendAndWait(b *testing.B, via int, path string) reaction {
	b.Helper()
	evs, err := c.stores[via].Events().Stream(path).Append(context.Background(), foldtype.EventInput{Type: "r"})
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("%s@%d", path, evs[0].Offset)
	re, ok := c.log.wait(key, 10*time.Second)
	if !ok {
		b.Fatalf("no processor saw %s within 10 s", key)
	}
	return re
}

// run appends b.N events, one at a time, spread over the streams, each through the stream's
// owner (throughOwner) or through another node, and reports append-acknowledged → ProcessEvent
// (p50/p99/max-ms, 0 when the processor saw the event before the append returned) and append
// called → ProcessEvent (call-p50/p99-ms, which includes the commit).
func (c *reactionCluster) run(b *testing.B, throughOwner bool) {
	n := len(c.stores)
	lat := make([]time.Duration, 0, b.N)
	call := make([]time.Duration, 0, b.N)
	moved := 0
	b.ResetTimer()
	for i := range b.N {
		path := fmt.Sprintf("/r/%d", i%reactionStreams)
		own := c.owner[path]
		via := own
		if !throughOwner && n > 1 {
			via = (own + 1 + (i/reactionStreams)%(n-1)) % n
		}
		ctx := context.Background()
		start := time.Now()
		evs, err := c.stores[via].Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "r"})
		acked := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("%s@%d", path, evs[0].Offset)
		re, ok := c.log.wait(key, 10*time.Second)
		if !ok {
			b.Fatalf("no processor saw %s (appended through n%d, owner n%d) within 10 s", key, via, own)
		}
		if re.node != own {
			moved++
			c.owner[path] = re.node
		}
		lat = append(lat, max(0, re.at.Sub(acked))) // 0: seen before the append returned
		call = append(call, re.at.Sub(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(call)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(ms(call[len(call)/2]), "call-p50-ms")
	b.ReportMetric(ms(call[len(call)*99/100]), "call-p99-ms")
	b.ReportMetric(float64(moved), "moved")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPatternReaction measures how soon a pattern processor reacts to a commit: from an
// append's acknowledgement to the processor's ProcessEvent of it, one event at a time over 20
// streams under "/r/*" (docs/postgres.md#processors-and-leases). On PostgreSQL three hosts, each
// on its own store on one schema, register the pattern; each stream's processor runs on one of
// them, and the event is appended through another node (through=other) or through the owner
// (through=owner). SQLite, one node, is the reference. Run it with e.g.
//
//	go test -run '^$' -bench PatternReaction -benchtime 300x ./host
func BenchmarkPatternReaction(b *testing.B) {
	b.Run("postgres-3nodes", func(b *testing.B) {
		url := pgtest.URL(b)
		c := startReactionCluster(b, func() *stream.Store { return openStore(b, url, nil) }, 3)
		b.Run("through=other", func(b *testing.B) { c.run(b, false) })
		b.Run("through=owner", func(b *testing.B) { c.run(b, true) })
	})
	b.Run("sqlite-1node", func(b *testing.B) {
		file := b.TempDir() + "/r.db"
		c := startReactionCluster(b, func() *stream.Store { return openStore(b, file, nil) }, 1)
		b.Run("through=owner", func(b *testing.B) { c.run(b, true) })
	})
}
