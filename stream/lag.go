package stream

import (
	"context"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// LagCountLimit bounds the durable messages [Events.Lag] reads: past it the rest of the stream's
// positions are counted as if each held an event the reader consumes (Lag.Estimated), so one call
// reads at most this many messages whatever the lag.
const LagCountLimit = 1000

// Lag is what a reader at an offset has not read yet of a stream's durable messages ([Events.Lag]).
type Lag struct {
	// Events is how many durable events the reader consumes follow the offset: ephemeral
	// messages (live-state deltas) take positions but are not counted, nor are events of types
	// it does not consume. Exact while the messages after the offset are at most LagCountLimit.
	Events int64
	// Estimated reports that Events passed LagCountLimit: the positions after the last message
	// counted were added as they are, so Events is an upper bound.
	Estimated bool
	// Oldest is the commit time of the first of them (the oldest event the reader owes); the zero
	// time when there is none.
	Oldest time.Time
}

// Lag reports the durable events of the stream at path after offset after that a reader consuming
// consumes (nil: every durable event; see [foldtype.ConsumesEvent]) has yet to read: how many, and
// the commit time of the first. A host's metrics use it for a processor's lag in events and in
// seconds (docs/server.md#metrics). It reads at most LagCountLimit messages in one read
// transaction and never renews a TTL; a stream that is missing, expired or deleted is refused with
// its code.
func (e *Events) Lag(ctx context.Context, path string, after int64, consumes []string) (Lag, error) {
	s := e.s
	var lag Lag
	err := s.k.Read(ctx, func(q driver.Reader) error {
		lag = Lag{}
		r, err := s.loadLive(ctx, q, path, s.clock.Now())
		if err != nil {
			return err
		}
		if r.Tail <= after {
			return nil
		}
		last, read := after, 0
		err = kernel.ScanMessages(ctx, q, r, after, func(m kernel.Message) bool {
			read++
			last = m.Offset
			if consumes != nil {
				// An unreadable body is counted: the reader owes it (it skips it with a report).
				if ev, err := decodeEvent(path, m); err == nil && !foldtype.ConsumesEvent(consumes, ev) {
					return read < LagCountLimit
				}
			}
			if lag.Events == 0 {
				lag.Oldest = time.UnixMilli(m.CreatedMs)
			}
			lag.Events++
			return read < LagCountLimit
		})
		if err != nil {
			return err
		}
		if read >= LagCountLimit && r.Tail > last {
			lag.Events += r.Tail - last
			lag.Estimated = true
		}
		return nil
	})
	return lag, err
}
