package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Config sizes the scenarios. DefaultConfig is what `bash bench/run.sh` measures.
type Config struct {
	MessageSize int // bytes per JSON message

	AppendWriters []int // concurrent writers for the plain-append scenarios
	AppendTotal   int   // messages per plain-append measurement, split evenly over the writers

	Producers       int // idempotent producers, each on its own stream
	ProducerBatches int // batches per producer per measurement
	BatchSize       int // messages per batch
	InFlight        int // batches in flight per producer

	CatchUpMessages int // messages in the catch-up stream (written once per server)
	// CatchUpSizes, when set, replaces CatchUpMessages with one catch-up scenario per size (for
	// example 100,000 and 1,000,000, to see whether a read stays linear in the stream's length).
	CatchUpSizes []int
	// CatchUpMessageSize is the size of the catch-up streams' messages (0: MessageSize); larger
	// messages make a 1 GiB stream quick to write.
	CatchUpMessageSize int

	SSEMessages int // POST→SSE round trips per measurement

	// ManyStreams, when set, adds per count N the many-streams scenarios: stream creation, and
	// plain and producer appends spread over N streams (created once per server).
	ManyStreams []int
	// ManyWriters is the concurrency of the many-streams scenarios (0: 16).
	ManyWriters int

	// MeasureFor caps how long one throughput measurement keeps issuing requests: writers stop
	// at the count or at this time, whichever comes first, and the rate is what completed over
	// the time it took. A slow server is thus measured over the same window, not a longer one.
	MeasureFor time.Duration

	Timeout time.Duration // hard deadline of one measurement; exceeding it is an error
}

// DefaultConfig returns the sizes used by bench/run.sh: each measurement takes a second or a few
// on the reference, and the whole run a few minutes.
func DefaultConfig() Config {
	return Config{
		MessageSize:     MessageSizeDefault,
		AppendWriters:   []int{16, 64},
		AppendTotal:     20_000,
		Producers:       4,
		ProducerBatches: 200,
		BatchSize:       100,
		InFlight:        5,
		CatchUpMessages: 100_000,
		SSEMessages:     300,
		MeasureFor:      4 * time.Second,
		Timeout:         30 * time.Second,
	}
}

// Metric is one figure a scenario reports.
type Metric struct {
	Name         string // e.g. "messages/s"
	HigherBetter bool
}

// Sample is one measurement of one scenario on one server: a value per metric name.
type Sample map[string]float64

// MessagesKey is the Sample entry holding how many messages a measurement wrote or read; the
// runner divides the server's CPU time by it (CPUMetric).
const MessagesKey = "messages"

// CPUMetric is the server's CPU time (user + system, from /proc) per message, which the runner
// adds to every scenario. On a shared, noisy machine it is steadier than the rates: it says what
// each message costs the server, whatever else competes for the cores.
var CPUMetric = Metric{"server CPU µs/msg", false}

// Scenario is one load shape. Setup runs once per server before the rounds (it may be nil); Run is
// one measurement and must stay within cfg.Timeout.
type Scenario struct {
	Name    string
	Detail  string
	Metrics []Metric
	Setup   func(ctx context.Context, c *Client) error
	Run     func(ctx context.Context, c *Client, round int) (Sample, error)
	// PeakRSS makes the runner sample the server's resident memory during each measurement and
	// report its peak (RSSMetric).
	PeakRSS bool
}

// RSSMetric is the server's peak resident memory during a measurement, sampled from
// /proc/PID/status every 10 ms (scenarios with PeakRSS).
var RSSMetric = Metric{"server peak RSS MB", false}

// Scenarios returns the four scenarios, sized by cfg. Stream names start with run, so
// repeated runs against a long-lived server never collide.
//
// Every round of a scenario reuses the same streams (appending to them, reading them at the tail),
// which keeps the number of streams in one run below 100. The reference's file-backed store keeps
// at most 100 segment files open and, past that, fails appends of streams whose file handle it
// evicted between the write and the fsync (it answers 404 "Stream not found", because its error
// text "handle not found" matches its not-found mapping). Fresh streams per round trigger that.
func Scenarios(cfg Config, run string) []Scenario {
	var out []Scenario
	for _, shared := range []bool{false, true} {
		for _, w := range cfg.AppendWriters {
			out = append(out, appendScenario(cfg, run, w, shared))
		}
	}
	out = append(out, producerScenario(cfg, run))
	sizes := cfg.CatchUpSizes
	if len(sizes) == 0 {
		sizes = []int{cfg.CatchUpMessages}
	}
	for _, n := range sizes {
		out = append(out, catchUpScenario(cfg, run, n))
	}
	out = append(out, sseScenario(cfg, run))
	for _, n := range cfg.ManyStreams {
		out = append(out, manyStreamsScenarios(cfg, run, n)...)
	}
	return out
}

func appendScenario(cfg Config, run string, writers int, shared bool) Scenario {
	per := cfg.AppendTotal / writers
	where := "separate streams"
	if shared {
		where = "one shared stream"
	}
	name := fmt.Sprintf("append, %d writers, %s", writers, where)
	return Scenario{
		Name: name,
		Detail: fmt.Sprintf("%d writers × up to %d plain POSTs (or %s) of one %d-byte JSON message, one request at a time per writer",
			writers, per, cfg.MeasureFor, cfg.MessageSize),
		Metrics: []Metric{{"messages/s", true}},
		Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
			streams := make([]string, writers)
			for w := range streams {
				if shared {
					streams[w] = fmt.Sprintf("%s-append-shared-%d", run, writers)
				} else {
					streams[w] = fmt.Sprintf("%s-append-sep-%d-w%d", run, writers, w)
				}
				if w == 0 || !shared {
					if err := c.Create(ctx, streams[w]); err != nil {
						return nil, err
					}
				}
			}
			bodies := make([][]byte, per)
			for i := range bodies {
				bodies[i] = Message(int64(i), cfg.MessageSize)
			}
			ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			defer cancel()
			var done atomic.Int64
			var firstErr error
			var once sync.Once
			var wg sync.WaitGroup
			start := time.Now()
			stop := start.Add(cfg.MeasureFor)
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(stream string) {
					defer wg.Done()
					for i := 0; i < per && time.Now().Before(stop); i++ {
						if _, err := c.Append(ctx, stream, bodies[i]); err != nil {
							once.Do(func() { firstErr = err })
							return
						}
						done.Add(1)
					}
				}(streams[w])
			}
			wg.Wait()
			elapsed := time.Since(start)
			if firstErr != nil {
				return nil, fmt.Errorf("%d of %d appended: %w", done.Load(), writers*per, firstErr)
			}
			return Sample{"messages/s": float64(done.Load()) / elapsed.Seconds(), MessagesKey: float64(done.Load())}, nil
		},
	}
}

func producerScenario(cfg Config, run string) Scenario {
	batchBytes := len(Batch(0, cfg.BatchSize, cfg.MessageSize))
	return Scenario{
		Name: fmt.Sprintf("idempotent producers, %d × batches of %d", cfg.Producers, cfg.BatchSize),
		Detail: fmt.Sprintf("%d producers, each on its own stream, up to %d batches (or %s) of %d messages (%d-byte bodies), up to %d in flight per producer",
			cfg.Producers, cfg.ProducerBatches, cfg.MeasureFor, cfg.BatchSize, batchBytes, cfg.InFlight),
		Metrics: []Metric{{"messages/s", true}, {"MB/s", true}, RetriesMetric},
		Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
			bodies := make([][]byte, cfg.ProducerBatches)
			for i := range bodies {
				bodies[i] = Batch(int64(i*cfg.BatchSize), cfg.BatchSize, cfg.MessageSize)
			}
			streams := make([]string, cfg.Producers)
			for p := range streams {
				streams[p] = fmt.Sprintf("%s-producer-p%d", run, p)
				if err := c.Create(ctx, streams[p]); err != nil {
					return nil, err
				}
			}
			ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, cfg.Producers)
			stats := make([]ProduceStats, cfg.Producers)
			start := time.Now()
			stop := start.Add(cfg.MeasureFor)
			for p := range streams {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					// A fresh producer id per round starts at seq 0 on the reused stream.
					id := fmt.Sprintf("dsbench-r%d-p%d", round, p)
					stats[p], errs[p] = Produce(ctx, c, streams[p], id, bodies, cfg.InFlight, stop)
				}(p)
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			if err := errors.Join(errs...); err != nil {
				return nil, err
			}
			acked, retries := 0, 0
			for _, st := range stats {
				acked += st.Acked
				retries += st.Retries
			}
			msgs := float64(acked * cfg.BatchSize)
			bytes := float64(acked * batchBytes)
			return Sample{"messages/s": msgs / elapsed, "MB/s": bytes / 1e6 / elapsed, RetriesMetric.Name: float64(retries), MessagesKey: msgs}, nil
		},
	}
}

// RetriesMetric counts the producer requests answered 409 (a sequence gap: the request overtook
// an earlier one of its producer) and resent, in one measurement.
var RetriesMetric = Metric{"409 retries", false}

// ProduceStats counts what Produce did beyond the batches themselves.
type ProduceStats struct {
	Acked   int // batches acknowledged (200 accepted or 204 duplicate)
	Retries int // 409 sequence gaps from requests that overtook an earlier one, resent
}

// maxGapRetries bounds how often one batch is resent after a sequence gap.
const maxGapRetries = 100

// Produce sends bodies as producer id's batches with seq 0, 1, … (epoch 0) to stream, with up to
// inFlight requests outstanding, and starts no batch after stop (the zero time: no limit).
// Concurrent requests may reach the server out of order; a request
// that overtook an earlier one gets 409 with Producer-Expected-Seq, waits for the earlier
// sequences to be acknowledged, and is resent — what the reference client's IdempotentProducer
// does.
func Produce(ctx context.Context, c *Client, stream, id string, bodies [][]byte, inFlight int, stop time.Time) (ProduceStats, error) {
	acked := make([]chan struct{}, len(bodies))
	for i := range acked {
		acked[i] = make(chan struct{})
	}
	var retries, ackedN atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
send:
	for seq := range bodies {
		if !stop.IsZero() && !time.Now().Before(stop) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break send
		}
		wg.Add(1)
		go func(seq int) {
			defer wg.Done()
			defer func() { <-sem }()
			for attempt := 0; attempt <= maxGapRetries; attempt++ {
				r, err := c.ProducerAppend(ctx, stream, id, 0, int64(seq), bodies[seq])
				if err != nil {
					fail(err)
					cancel()
					return
				}
				if r.Status != 409 {
					ackedN.Add(1)
					close(acked[seq])
					return
				}
				if r.ExpectedSeq < 0 || r.ExpectedSeq >= int64(seq) {
					fail(fmt.Errorf("producer %s seq %d: unrecoverable gap, server expects %d", id, seq, r.ExpectedSeq))
					cancel()
					return
				}
				retries.Add(1)
				for s := r.ExpectedSeq; s < int64(seq); s++ {
					select {
					case <-acked[s]:
					case <-ctx.Done():
						fail(ctx.Err())
						return
					}
				}
			}
			fail(fmt.Errorf("producer %s seq %d: still a gap after %d resends", id, seq, maxGapRetries))
			cancel()
		}(seq)
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return ProduceStats{Acked: int(ackedN.Load()), Retries: int(retries.Load())}, firstErr
}

func catchUpScenario(cfg Config, run string, messages int) Scenario {
	const batch = 500 // larger than the producer scenario's, so that setup is quick on a slow server
	n := messages / batch * batch
	size := cfg.MessageSize
	name := fmt.Sprintf("catch-up read, %d messages", n)
	if cfg.CatchUpMessageSize > 0 && cfg.CatchUpMessageSize != cfg.MessageSize {
		size = cfg.CatchUpMessageSize
		name = fmt.Sprintf("catch-up read, %d messages of %d bytes", n, size)
	}
	stream := fmt.Sprintf("%s-catchup-%d-%d", run, n, size)
	return Scenario{
		Name:    name,
		Detail:  fmt.Sprintf("GET from offset -1 following Stream-Next-Offset to the tail of a stream of %d %d-byte messages (%.0f MB, written once, as batches of %d); the server's resident memory is sampled every 10 ms during the read", n, size, float64(n)*float64(size)/1e6, batch),
		Metrics: []Metric{{"MB/s", true}, {"messages/s", true}},
		PeakRSS: true,
		Setup: func(ctx context.Context, c *Client) error {
			if err := c.Create(ctx, stream); err != nil {
				return err
			}
			bodies := make([][]byte, n/batch)
			for i := range bodies {
				bodies[i] = Batch(int64(i*batch), batch, size)
			}
			ctx, cancel := context.WithTimeout(ctx, 4*cfg.Timeout)
			defer cancel()
			_, err := Produce(ctx, c, stream, "dsbench-catchup", bodies, cfg.InFlight, time.Time{})
			return err
		},
		Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
			ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			defer cancel()
			start := time.Now()
			res, err := c.CatchUp(ctx, stream)
			elapsed := time.Since(start).Seconds()
			if err != nil {
				return nil, err
			}
			if res.Messages != n {
				return nil, fmt.Errorf("catch-up read %d messages, want %d", res.Messages, n)
			}
			return Sample{"MB/s": float64(res.Bytes) / 1e6 / elapsed, "messages/s": float64(res.Messages) / elapsed, MessagesKey: float64(res.Messages)}, nil
		},
	}
}

// sseWait bounds how long one message may take to arrive on the SSE reader.
const sseWait = 5 * time.Second

func sseScenario(cfg Config, run string) Scenario {
	return Scenario{
		Name:    "POST→SSE latency",
		Detail:  fmt.Sprintf("one live=sse reader; one writer POSTs %d single %d-byte messages one at a time; time from POST start to the SSE data event", cfg.SSEMessages, cfg.MessageSize),
		Metrics: []Metric{{"p50 ms", false}, {"p99 ms", false}},
		Run: func(ctx context.Context, c *Client, round int) (Sample, error) {
			stream := run + "-sse"
			if err := c.Create(ctx, stream); err != nil {
				return nil, err
			}
			ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			defer cancel()
			lat, err := SSELatency(ctx, c, stream, cfg.SSEMessages, cfg.MessageSize)
			if err != nil {
				return nil, err
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			return Sample{"p50 ms": ms(Percentile(lat, 50)), "p99 ms": ms(Percentile(lat, 99)), MessagesKey: float64(len(lat))}, nil
		},
	}
}

// SSELatency opens a live=sse reader at the tail of stream, then POSTs n messages one at a time,
// each after the previous one arrived, and returns for each the time from the start of its POST
// to the arrival of the SSE data event that carries it.
func SSELatency(ctx context.Context, c *Client, stream string, n, size int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sse, err := c.OpenSSE(ctx, stream, "now")
	if err != nil {
		return nil, err
	}
	defer sse.Close()

	type arrival struct {
		id int64
		at time.Time
	}
	arrivals := make(chan arrival, 1024)
	ready := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		first := true
		for {
			ev, err := sse.Next()
			if err != nil {
				readErr <- err
				return
			}
			now := time.Now()
			if first {
				// The first event (a control event at the tail) shows the subscription is live.
				close(ready)
				first = false
			}
			if ev.Type != "data" {
				continue
			}
			for _, id := range MessageIDs(ev.Data) {
				select {
				case arrivals <- arrival{id, now}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	select {
	case <-ready:
	case err := <-readErr:
		return nil, fmt.Errorf("sse before first event: %w", err)
	case <-time.After(sseWait):
		return nil, errors.New("sse: no first event")
	}

	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		body := Message(int64(i), size)
		start := time.Now()
		if _, err := c.Append(ctx, stream, body); err != nil {
			return lat, err
		}
		timeout := time.After(sseWait)
	wait:
		for {
			select {
			case a := <-arrivals:
				if a.id == int64(i) {
					lat = append(lat, a.at.Sub(start))
					break wait
				}
			case err := <-readErr:
				return lat, fmt.Errorf("sse after %d messages: %w", i, err)
			case <-timeout:
				return lat, fmt.Errorf("sse: message %d did not arrive within %s", i, sseWait)
			case <-ctx.Done():
				return lat, fmt.Errorf("sse: waiting for message %d: %w", i, ctx.Err())
			}
		}
	}
	return lat, nil
}
