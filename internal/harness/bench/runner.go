package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"syscall"
	"time"
)

// settle is the pause between two measurements, so that one server's background work (WAL
// checkpoints, garbage collection) does not land in the next measurement.
const settle = 300 * time.Millisecond

// Result holds every sample of one scenario: Samples[target][round].
type Result struct {
	Scenario Scenario
	Samples  map[string][]Sample
	Errors   map[string][]string
	// Counters are the database counter metrics measured on targets with Counters (per second
	// of the measurement); empty when no target has them.
	Counters []Metric
}

// Run measures every scenario on every target for warmups+rounds rounds and keeps the last
// rounds: the warm-up rounds pay for first use (new segment files and database pages, JIT
// compilation in node) and are only printed. Round r runs the targets in the given order when r
// is even and in reverse when r is odd, so neither server always goes first. Progress lines go to
// progress. A failed measurement is recorded in Errors and the run goes on.
func Run(ctx context.Context, targets []*Target, scenarios []Scenario, warmups, rounds int, progress io.Writer) []Result {
	clients := make(map[string]*Client, len(targets))
	for _, t := range targets {
		clients[t.Name] = &Client{Base: t.Base, HTTP: NewHTTPClient()}
	}
	var results []Result
	for _, sc := range scenarios {
		res := Result{Scenario: sc, Samples: map[string][]Sample{}, Errors: map[string][]string{}}
		for _, t := range targets {
			if t.Counters != nil {
				res.Counters = counterMetrics
				break
			}
		}
		skip := map[string]bool{}
		if sc.Setup != nil {
			for _, t := range targets {
				start := time.Now()
				if err := sc.Setup(ctx, clients[t.Name]); err != nil {
					skip[t.Name] = true
					res.Errors[t.Name] = append(res.Errors[t.Name], "setup: "+err.Error())
					fmt.Fprintf(progress, "%-10s %s: setup failed: %v\n", t.Name, sc.Name, err)
					continue
				}
				fmt.Fprintf(progress, "%-10s %s: setup %.1fs\n", t.Name, sc.Name, time.Since(start).Seconds())
			}
		}
		for r := -warmups; r < rounds; r++ {
			for i := range targets {
				t := targets[i]
				if (r+warmups)%2 == 1 {
					t = targets[len(targets)-1-i]
				}
				if skip[t.Name] || ctx.Err() != nil {
					continue
				}
				c := clients[t.Name]
				c.HTTP.CloseIdleConnections()
				runtime.GC()
				time.Sleep(settle)
				var rss *rssSampler
				if sc.PeakRSS {
					rss = sampleRSS(t)
				}
				var ctr0 map[string]float64
				if t.Counters != nil {
					ctr0, _ = t.Counters(ctx)
				}
				cpu0, cpuErr := t.CPUTime()
				self0 := selfCPU()
				start := time.Now()
				s, err := sc.Run(ctx, c, r+warmups)
				wall := time.Since(start)
				cpu1, cpuErr1 := t.CPUTime()
				self1 := selfCPU()
				if ctr0 != nil && err == nil {
					if ctr1, cerr := t.Counters(ctx); cerr == nil {
						for _, m := range counterMetrics {
							if m == PGCPUMetric {
								c0, ok0 := ctr0[pgCPUKey]
								c1, ok1 := ctr1[pgCPUKey]
								if ok0 && ok1 && s[MessagesKey] > 0 {
									s[m.Name] = (c1 - c0) * 1e6 / s[MessagesKey]
								}
								continue
							}
							s[m.Name] = (ctr1[m.Name] - ctr0[m.Name]) / wall.Seconds()
						}
					}
				}
				if rss != nil {
					if peak := rss.stop(); err == nil && peak > 0 {
						s[RSSMetric.Name] = float64(peak) / 1e6
					}
				}
				if err == nil {
					for _, m := range sc.Metrics {
						switch m {
						case RSSNowMetric:
							if rss, err := t.RSS(); err == nil {
								s[m.Name] = float64(rss) / 1e6
							}
						case DiskMetric:
							s[m.Name] = float64(dirBytes(t.DataDir)) / 1e6
						}
					}
				}
				if err == nil && cpuErr == nil && cpuErr1 == nil && s[MessagesKey] > 0 {
					used := cpu1 - cpu0
					s[CPUMetric.Name] = float64(used.Microseconds()) / s[MessagesKey]
					s[coresKey] = used.Seconds() / wall.Seconds()
					s[loadgenKey] = float64((self1 - self0).Microseconds()) / s[MessagesKey]
				}
				label := fmt.Sprintf("round %d", r+1)
				if r < 0 {
					label = "warm-up"
				}
				if err != nil && r < 0 {
					fmt.Fprintf(progress, "%-10s %s %s: error: %v\n", t.Name, sc.Name, label, err)
					continue
				}
				if r < 0 {
					fmt.Fprintf(progress, "%-10s %s %s: %s\n", t.Name, sc.Name, label, formatSample(sc.Metrics, s))
					continue
				}
				if err != nil {
					res.Errors[t.Name] = append(res.Errors[t.Name], fmt.Sprintf("round %d: %v", r+1, err))
					fmt.Fprintf(progress, "%-10s %s round %d: error: %v\n", t.Name, sc.Name, r+1, err)
					continue
				}
				res.Samples[t.Name] = append(res.Samples[t.Name], s)
				fmt.Fprintf(progress, "%-10s %s round %d: %s\n", t.Name, sc.Name, r+1, formatSample(sc.Metrics, s))
			}
		}
		results = append(results, res)
	}
	return results
}

// Median is the median over the rounds of one metric on one target, NaN without samples.
func (r Result) Median(target, metric string) float64 {
	var xs []float64
	for _, s := range r.Samples[target] {
		if v, ok := s[metric]; ok {
			xs = append(xs, v)
		}
	}
	return Median(xs)
}

// coresKey is the Sample entry holding the server's CPU time over the measurement's wall time
// (1.0 = one core busy throughout); printed in progress lines only.
const coresKey = "server cores"

// loadgenKey is the Sample entry holding the load generator's own CPU time (this process: user +
// system) per message of the measurement; printed in progress lines only. On a machine where both
// share the cores it says how much of them the instrument itself takes.
const loadgenKey = "loadgen CPU µs/msg"

// selfCPU is the user and system CPU time this process used so far (0 if unknown).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func formatSample(ms []Metric, s Sample) string {
	out := ""
	for i, m := range append(ms, CPUMetric) {
		if i > 0 {
			out += ", "
		}
		v, ok := s[m.Name]
		if !ok {
			v = math.NaN()
		}
		out += formatValue(v) + " " + m.Name
	}
	if v, ok := s[coresKey]; ok {
		out += fmt.Sprintf(" (server busy %.2f cores", v)
		if g, ok := s[loadgenKey]; ok {
			out += fmt.Sprintf("; load generator %s µs/msg", formatValue(g))
		}
		out += ")"
	}
	return out
}

// Metrics is the scenario's metrics followed by CPUMetric (and RSSMetric when it samples memory).
func (r Result) Metrics() []Metric {
	ms := append(append([]Metric(nil), r.Scenario.Metrics...), CPUMetric)
	if r.Scenario.PeakRSS {
		ms = append(ms, RSSMetric)
	}
	return append(ms, r.Counters...)
}

// counterMetrics are the database's own counters, per second of a measurement, of targets with
// Counters (PostgreSQL: pg_stat_database and pg_stat_wal); the names are the keys Counters returns.
var counterMetrics = []Metric{
	{"PG commits/s", false},
	{"PG WAL writes/s", false},
	{"PG WAL syncs/s", false},
	PGCPUMetric,
}

// rssSampler records the peak of a target's resident memory until stopped.
type rssSampler struct {
	done chan struct{}
	peak chan int64
}

// sampleRSS starts sampling t's resident memory every 10 ms.
func sampleRSS(t *Target) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), peak: make(chan int64, 1)}
	go func() {
		var peak int64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := t.RSS(); err == nil && v > peak {
				peak = v
			}
			select {
			case <-s.done:
				s.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the peak in bytes (0 when it could not be read).
func (s *rssSampler) stop() int64 {
	close(s.done)
	return <-s.peak
}
