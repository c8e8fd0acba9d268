package bench

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The many-streams scenarios (Config.ManyStreams): how a server copes when its writes are spread
// over many streams rather than a few. Per stream count N:
//
//   - stream creation: concurrent PUTs of fresh streams, streams/s;
//   - plain appends over N streams: single-message POSTs, each to the next stream in turn;
//   - producer batches over N streams: batches of Config.BatchSize, each to the next stream in turn,
//     one producer per stream.
//
// The N streams are created once per server (Setup) and reused by every round. The report adds
// the server's resident memory after the measurement and its data directory's size, from which
// docs/bench.md derives the per-stream overhead.

// DiskMetric is the size of a server's data directory after a measurement.
var DiskMetric = Metric{"server data MB", false}

// RSSNowMetric is the server's resident memory after a measurement.
var RSSNowMetric = Metric{"server RSS MB", false}

func (c Config) manyWriters() int {
	if c.ManyWriters > 0 {
		return c.ManyWriters
	}
	return 16
}

func manyStreamsScenarios(cfg Config, run string, n int) []Scenario {
	w := cfg.manyWriters()
	names := func(prefix string) func(i int) string {
		return func(i int) string { return fmt.Sprintf("%s-%s-%d-%d", run, prefix, n, i) }
	}
	plainNames, prodNames := names("many"), names("manyp")
	setup := func(name func(int) string) func(ctx context.Context, c *Client) error {
		return func(ctx context.Context, c *Client) error {
			_, err := createMany(ctx, c, w, n, name, time.Time{})
			return err
		}
	}
	return []Scenario{
		{
			Name:    fmt.Sprintf("many streams: creation, %d creators (up to %d streams)", w, n),
			Detail:  fmt.Sprintf("%d concurrent PUTs of fresh JSON streams, up to %d streams or %s per measurement", w, n, cfg.MeasureFor),
			Metrics: []Metric{{"streams/s", true}},
			Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
				ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				defer cancel()
				start := time.Now()
				made, err := createMany(ctx, c, w, n, func(i int) string { return fmt.Sprintf("%s-mk-%d-r%d-%d", run, n, round, i) }, start.Add(cfg.MeasureFor))
				if err != nil {
					return nil, err
				}
				return Sample{"streams/s": float64(made) / time.Since(start).Seconds(), MessagesKey: float64(made)}, nil
			},
		},
		{
			Name: fmt.Sprintf("many streams: append, %d writers over %d streams", w, n),
			Detail: fmt.Sprintf("%d writers × single-message POSTs, each to the next of %d streams in turn; %d messages or %s per measurement",
				w, n, cfg.AppendTotal, cfg.MeasureFor),
			Metrics: []Metric{{"messages/s", true}, RSSNowMetric, DiskMetric},
			Setup:   setup(plainNames),
			Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
				body := Message(int64(round), cfg.MessageSize)
				done, elapsed, err := spread(ctx, cfg, w, cfg.AppendTotal, func(ctx context.Context, i int) error {
					_, err := c.Append(ctx, plainNames(i%n), body)
					return err
				})
				if err != nil {
					return nil, err
				}
				return Sample{"messages/s": float64(done) / elapsed.Seconds(), MessagesKey: float64(done)}, nil
			},
		},
		{
			Name: fmt.Sprintf("many streams: producer batches, %d senders over %d streams", w, n),
			Detail: fmt.Sprintf("%d senders × producer batches of %d messages, each to the next of %d streams in turn (one producer per stream and round); %d batches or %s per measurement",
				w, cfg.BatchSize, n, cfg.Producers*cfg.ProducerBatches, cfg.MeasureFor),
			Metrics: []Metric{{"messages/s", true}, RetriesMetric, RSSNowMetric, DiskMetric},
			Setup:   setup(prodNames),
			Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
				body := Batch(int64(round), cfg.BatchSize, cfg.MessageSize)
				var retries atomic.Int64
				done, elapsed, err := spread(ctx, cfg, w, cfg.Producers*cfg.ProducerBatches, func(ctx context.Context, i int) error {
					id := fmt.Sprintf("dsbench-many-r%d", round)
					seq := int64(i / n)
					for {
						r, err := c.ProducerAppend(ctx, prodNames(i%n), id, 0, seq, body)
						if err != nil {
							return err
						}
						if r.Status != 409 {
							return nil
						}
						// The previous batch to this stream is still in flight: wait for it.
						retries.Add(1)
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(time.Millisecond):
						}
					}
				})
				if err != nil {
					return nil, err
				}
				msgs := float64(done * cfg.BatchSize)
				return Sample{"messages/s": msgs / elapsed.Seconds(), RetriesMetric.Name: float64(retries.Load()), MessagesKey: msgs}, nil
			},
		},
	}
}

// createMany creates streams name(0), name(1), ... with w concurrent PUTs, up to n of them or
// until stop (the zero time: no limit), and returns how many it created. Each creator drives
// its own keep-alive connection by hand (rawConn), so that the load generator takes as little of
// the shared cores as it can.
func createMany(ctx context.Context, c *Client, w, n int, name func(int) string, stop time.Time) (int, error) {
	var next, made atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	var wg sync.WaitGroup
	for range w {
		rc, err := rawConnTo(c.Base)
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rc.Close()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || (!stop.IsZero() && !time.Now().Before(stop)) || ctx.Err() != nil {
					return
				}
				nm := name(i)
				status, body, err := rc.put(ctx, streamPath+nm, jsonType)
				if err != nil {
					fail(fmt.Errorf("create %s: %w", nm, err))
					return
				}
				if status != 201 && status != 200 {
					fail(&StatusError{Op: "create " + nm, Status: status, Body: body})
					return
				}
				made.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return int(made.Load()), fmt.Errorf("%d streams created: %w", made.Load(), firstErr)
	}
	return int(made.Load()), nil
}

// spread runs fn(ctx, 0), fn(ctx, 1), ... on w goroutines, up to total calls or cfg.MeasureFor,
// and returns how many completed and the time they took.
func spread(ctx context.Context, cfg Config, w, total int, fn func(ctx context.Context, i int) error) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var next, done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(cfg.MeasureFor)
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return int(done.Load()), elapsed, fmt.Errorf("%d done: %w", done.Load(), firstErr)
	}
	return int(done.Load()), elapsed, nil
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
