package foldstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wI2L/jsondiff"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/testsupport"
)

// BenchmarkCatchUp100k measures the catch-up reduce rate of a trivial counter over a 100k-event
// in-memory log, with real SQLite checkpoints (one write per 500-event page).
//
//	go test -run '^$' -bench CatchUp100k -benchtime 5x .
func BenchmarkCatchUp100k(b *testing.B) {
	const n = 100_000
	mem := testsupport.NewMemoryStream()
	batch := make([]foldstream.EventInput, 1000)
	for i := range batch {
		batch[i] = foldstream.EventInput{Type: "tick"}
	}
	for range n / len(batch) {
		if _, err := mem.Append(context.Background(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[ticksState]{Slug: "count", Version: "1", Consumes: []string{"tick"}})
	p := &fn[ticksState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[ticksState]) (ticksState, bool, error) {
			return ticksState{Ticks: a.State.Ticks + 1}, true, nil
		}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cps := testsupport.MemoryCheckpoints()
		eng, err := foldstream.NewEngine[ticksState](p, foldstream.EngineConfig{Stream: mem, Checkpoints: cps})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := eng.CatchUpFromLog(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := eng.ReducedThroughOffset(); got != n {
			b.Fatalf("cursor %d", got)
		}
		_ = eng.Drain(context.Background())
		_ = cps.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

type bigItem struct {
	ID    int      `json:"id"`
	Name  string   `json:"name"`
	Tags  []string `json:"tags"`
	Score float64  `json:"score"`
}

type bigDoc struct {
	Items   []bigItem          `json:"items"`
	Index   map[string]bigItem `json:"index"`
	Counter int                `json:"counter"`
}

// bigDocument builds a ~1 MB projection.
func bigDocument() bigDoc {
	d := bigDoc{Index: map[string]bigItem{}}
	for i := range 4400 {
		it := bigItem{ID: i, Name: fmt.Sprintf("item-%06d-with-a-longer-name", i), Tags: []string{"alpha", "beta", "gamma"}, Score: float64(i) / 7}
		d.Items = append(d.Items, it)
		d.Index[fmt.Sprintf("k%06d", i)] = it
	}
	return d
}

// BenchmarkLiveStateDiff compares the live-state diff of a ~1 MB state with one changed field:
// foldstream's raw-text diff (skips byte-identical subtrees) against a naive whole-document diff
// (github.com/wI2L/jsondiff, which decodes both documents and walks every node). Both start from
// the two documents' JSON text. "set" is what LiveState.Set costs the engine per publish: the
// new value encoded against the previous text (rawjson.Reencode compares what did not change
// instead of encoding it) plus the indexed diff (only the members in the changed window are
// parsed); "set-marshal-only" is a whole marshal of the value, what Set cost before.
// "set-changed" is LiveState.SetChanged told the one member that changed (only it is encoded and
// spliced in); "set-changed-nested" declares a member inside the 4,400-entry map. cpu-µs/op is the
// process's CPU time per op, the figure to read on a loaded machine.
//
//	go test -run '^$' -bench LiveStateDiff .
func BenchmarkLiveStateDiff(b *testing.B) {
	d := bigDocument()
	before, _ := json.Marshal(d)
	d.Counter = 1
	after, _ := json.Marshal(d)
	b.Logf("document size: %d bytes", len(before))
	b.Run("foldstream", func(b *testing.B) {
		b.SetBytes(int64(len(after)))
		for range b.N {
			ops, err := rawjson.Diff(before, after)
			if err != nil || len(ops) != 1 {
				b.Fatalf("ops %v err %v", ops, err)
			}
		}
	})
	b.Run("set-marshal-only", func(b *testing.B) { // the floor: what Set pays before diffing
		b.SetBytes(int64(len(after)))
		for i := range b.N {
			d.Counter = i + 2
			if _, err := json.Marshal(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("naive-jsondiff", func(b *testing.B) {
		b.SetBytes(int64(len(after)))
		for range b.N {
			p, err := jsondiff.CompareJSON(before, after)
			if err != nil || len(p) != 1 {
				b.Fatalf("ops %v err %v", p, err)
			}
		}
	})
	b.Run("naive-decode-and-compare", func(b *testing.B) {
		b.SetBytes(int64(len(after)))
		for range b.N {
			var x, y any
			_ = json.Unmarshal(before, &x)
			_ = json.Unmarshal(after, &y)
			if reflect.DeepEqual(x, y) {
				b.Fatal("equal")
			}
		}
	})
	b.Run("set", func(b *testing.B) {
		l := foldstream.NewLiveState(discardSink{}, "k", d, foldstream.LiveStateConfig{})
		b.SetBytes(int64(len(after)))
		cpu := processCPU()
		for i := range b.N {
			d.Counter = i + 2
			l.Set(d)
		}
		_ = l.Wait(context.Background())
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	// SetChanged told which member changed: that member is encoded and spliced into the held text
	// (one call a second also pays for the check against a full encoding, amortised here).
	b.Run("set-changed", func(b *testing.B) {
		l := foldstream.NewLiveState(discardSink{}, "k", d, foldstream.LiveStateConfig{})
		b.SetBytes(int64(len(after)))
		cpu := processCPU()
		for i := range b.N {
			d.Counter = i + 2
			l.SetChanged(d, "/counter")
		}
		_ = l.Wait(context.Background())
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	// A member deep inside the 4,400-entry map: the map's text is scanned to find it.
	b.Run("set-changed-nested", func(b *testing.B) {
		l := foldstream.NewLiveState(discardSink{}, "k", d, foldstream.LiveStateConfig{})
		b.SetBytes(int64(len(after)))
		cpu := processCPU()
		for i := range b.N {
			it := d.Index["k002000"]
			it.Score = float64(i)
			d.Index["k002000"] = it
			l.SetChanged(d, "/index/k002000/score")
		}
		_ = l.Wait(context.Background())
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
}

// processCPU is the process's CPU time so far (user + system, every thread: the GC's too).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type discardSink struct{}

func (discardSink) Append(context.Context, ...foldstream.EventInput) ([]foldstream.Event, error) {
	return nil, nil
}

// BenchmarkEngineLiveStateOneChangedField is one event through an engine whose ~1 MB state (the
// document of BenchmarkLiveStateDiff) changes in one field: "set" publishes through LiveState.Set,
// "declared" has Reduce declare the field (ReduceArgs.DeclareLiveChange), so the publish encodes
// that member alone. Both also marshal the whole state for the checkpoint, which the declaration
// does not change. cpu-µs/op is the process's CPU time per event.
//
//	go test -run '^$' -bench EngineLiveStateOneChangedField -benchtime 200x .
func BenchmarkEngineLiveStateOneChangedField(b *testing.B) {
	for _, declare := range []bool{false, true} {
		name := "set"
		if declare {
			name = "declared"
		}
		b.Run(name, func(b *testing.B) {
			c := foldstream.MustDefineContract(foldstream.ContractConfig[bigDoc]{Slug: "big", Version: "1", Consumes: []string{"tick"},
				Initial: func() (bigDoc, error) { return bigDocument(), nil }})
			p := &fn[bigDoc]{Base: foldstream.NewBase(c),
				reduce: func(a foldstream.ReduceArgs[bigDoc]) (bigDoc, bool, error) {
					s := a.State // shares Items and Index, which no reduce changes
					s.Counter++
					if declare {
						a.DeclareLiveChange("/counter")
					}
					return s, true, nil
				}}
			ctx := context.Background()
			mem := testsupport.NewMemoryStream()
			eng, err := foldstream.NewEngine[bigDoc](p, foldstream.EngineConfig{Stream: mem, Checkpoints: testsupport.MemoryCheckpoints()})
			if err != nil {
				b.Fatal(err)
			}
			mem.Register(eng)
			defer func() { _ = eng.Drain(ctx) }()
			tick := foldstream.EventInput{Type: "tick"}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for range b.N {
				evs, err := mem.Append(ctx, tick)
				if err != nil {
					b.Fatal(err)
				}
				if err := eng.WaitUntilProcessed(ctx, evs[0].Offset, 30*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			b.StopTimer()
			snap, err := eng.Snapshot(ctx)
			if err != nil || snap.State.Counter != b.N {
				b.Fatalf("counter %d after %d events (%v)", snap.State.Counter, b.N, err)
			}
		})
	}
}

// countingMetrics is an EngineMetrics that counts as cheaply as the host's: atomic adds.
type countingMetrics struct{ processed, emitted, nanos atomic.Int64 }

func (m *countingMetrics) EventProcessed(d time.Duration)   { m.processed.Add(1); m.nanos.Add(int64(d)) }
func (m *countingMetrics) EventSkipped(string)              {}
func (m *countingMetrics) EventsEmitted(n int)              { m.emitted.Add(int64(n)) }
func (m *countingMetrics) ProcessEventFailed(foldtype.Code) {}
func (m *countingMetrics) count() int64                     { return m.processed.Load() }

var _ foldstream.EngineMetrics = (*countingMetrics)(nil)

// BenchmarkEngineMetricsOverhead is the catch-up of a trivial counter over 20k in-memory events
// without and with EngineConfig.Metrics: the difference is what counting costs per event (two
// clock reads and the counter's adds).
//
//	go test -run '^$' -bench EngineMetricsOverhead -count 5 .
func BenchmarkEngineMetricsOverhead(b *testing.B) {
	const n = 20_000
	mem := testsupport.NewMemoryStream()
	batch := make([]foldstream.EventInput, 1000)
	for i := range batch {
		batch[i] = foldstream.EventInput{Type: "tick"}
	}
	for range n / len(batch) {
		if _, err := mem.Append(context.Background(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[ticksState]{Slug: "count", Version: "1", Consumes: []string{"tick"}})
	p := &fn[ticksState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[ticksState]) (ticksState, bool, error) {
			return ticksState{Ticks: a.State.Ticks + 1}, true, nil
		}}
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			m := &countingMetrics{}
			for b.Loop() {
				b.StopTimer()
				cfg := foldstream.EngineConfig{Stream: mem, Checkpoints: testsupport.MemoryCheckpoints()}
				if on {
					cfg.Metrics = m
				}
				eng, err := foldstream.NewEngine[ticksState](p, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := eng.CatchUpFromLog(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = eng.Drain(context.Background())
				b.StartTimer()
			}
			if on && m.count() != int64(n)*int64(b.N) {
				b.Fatalf("counted %d events, want %d", m.count(), n*b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/float64(b.N), "ns/event")
		})
	}
}
