package host

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// The host's running totals for metrics (docs/server.md#metrics). They live in the host, per
// registered slug, not in the engines: a pattern's engine that closes when idle and reopens, or an
// exact one rebuilt after its stream was deleted, adds to the same totals, so a counter never goes
// back and a processor's series stay while it is registered.

// hostMetrics are the host-wide totals: per-slug counters (the lease events are counted by the
// membership service: LeaseTotals).
type hostMetrics struct {
	slugs sync.Map // slug → *slugCounters
}

// slugCounters implement foldstream.EngineMetrics for every engine of one slug. The hot path
// (EventProcessed, EventsEmitted) is atomic adds only.
type slugCounters struct {
	processed atomic.Uint64
	emitted   atomic.Uint64
	buckets   []atomic.Uint64 // per bound of foldtype.ProcessEventBuckets, then +Inf; not cumulative
	sumNanos  atomic.Int64

	mu       sync.Mutex
	skipped  map[string]uint64
	failures map[foldtype.Code]uint64
}

var _ foldstream.EngineMetrics = (*slugCounters)(nil)

// countersFor returns slug's counters, made on first use.
func (h *Host) countersFor(slug string) *slugCounters {
	if c, ok := h.metrics.slugs.Load(slug); ok {
		return c.(*slugCounters)
	}
	c, _ := h.metrics.slugs.LoadOrStore(slug, &slugCounters{buckets: make([]atomic.Uint64, len(foldtype.ProcessEventBuckets)+1)})
	return c.(*slugCounters)
}

func (c *slugCounters) EventProcessed(d time.Duration) {
	c.processed.Add(1)
	c.sumNanos.Add(int64(d))
	s := d.Seconds()
	c.buckets[sort.SearchFloat64s(foldtype.ProcessEventBuckets, s)].Add(1)
}

func (c *slugCounters) EventsEmitted(n int) { c.emitted.Add(uint64(n)) }

func (c *slugCounters) EventSkipped(reason string) {
	c.mu.Lock()
	if c.skipped == nil {
		c.skipped = map[string]uint64{}
	}
	c.skipped[reason]++
	c.mu.Unlock()
}

func (c *slugCounters) ProcessEventFailed(code foldtype.Code) {
	c.mu.Lock()
	if c.failures == nil {
		c.failures = map[foldtype.Code]uint64{}
	}
	c.failures[code]++
	c.mu.Unlock()
}

// ProcessorTotals returns the running totals of every processor slug registered on the host
// (with Register or RegisterPattern; a runner given to Add counts nothing), sorted by slug. A
// slug's totals are kept from its first registration for the host's life: they only grow, across
// engines that close and reopen. The server's metrics read them at scrape time.
func (h *Host) ProcessorTotals() []foldtype.ProcessorTotals {
	var out []foldtype.ProcessorTotals
	h.metrics.slugs.Range(func(k, v any) bool {
		c := v.(*slugCounters)
		t := foldtype.ProcessorTotals{
			Slug:            k.(string),
			Processed:       c.processed.Load(),
			Emitted:         c.emitted.Load(),
			DurationBuckets: make([]uint64, len(foldtype.ProcessEventBuckets)),
		}
		var cum uint64
		for i := range c.buckets {
			cum += c.buckets[i].Load()
			if i < len(t.DurationBuckets) {
				t.DurationBuckets[i] = cum
			}
		}
		// The count is the buckets' total, read with them, so the histogram stays consistent
		// while events are observed during the read.
		t.DurationCount = cum
		t.DurationSum = time.Duration(c.sumNanos.Load()).Seconds()
		c.mu.Lock()
		if len(c.skipped) > 0 {
			t.Skipped = make(map[string]uint64, len(c.skipped))
			for r, n := range c.skipped {
				t.Skipped[r] = n
			}
		}
		if len(c.failures) > 0 {
			t.Failures = make(map[foldtype.Code]uint64, len(c.failures))
			for code, n := range c.failures {
				t.Failures[code] = n
			}
		}
		c.mu.Unlock()
		out = append(out, t)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}

// LeaseTotals returns how many processor leases the host holds now and how many it took over
// from and handed over to other nodes so far.
func (h *Host) LeaseTotals() foldtype.LeaseTotals {
	var t foldtype.LeaseTotals
	if ls := h.leases; ls != nil {
		held, takeovers, handovers := ls.svc.Totals()
		t.Held, t.Takeovers, t.Handovers = held, takeovers, handovers
	}
	return t
}

// ProcessorLag returns what processor slug on the stream at path has yet to process after offset
// after: the durable events it consumes and the commit time of the first ([stream.Events.Lag]).
// The server's metrics read it at scrape time for the lag in events and in seconds.
func (h *Host) ProcessorLag(ctx context.Context, path, slug string, after int64) (stream.Lag, error) {
	h.mu.Lock()
	reg := h.registrationFor(path, slug)
	h.mu.Unlock()
	if reg == nil {
		return stream.Lag{}, notRegistered(path, slug)
	}
	return h.store.Events().Lag(ctx, path, after, reg.consumes)
}
