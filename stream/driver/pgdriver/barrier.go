package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// The listen barrier (driver.ListenBarrier, docs/postgres.md#live-reads).
//
// A node hears other nodes' commits by notification, on its listener's connection. PostgreSQL
// delivers the notifications of different transactions in the order the transactions committed,
// and the listener hands them to the store one after the other. So when a marker notification
// this node sent, on a channel only its listener LISTENs on, comes back to the listener, every
// notification of a transaction that committed before the marker's has been handed over: a live
// read answered from the tail cache after that misses no commit acknowledged before it began.
//
// Callers share rounds: while one marker is on its way, the callers that arrive wait for the
// next, which is sent as soon as the one in flight came back (group commit's pattern), so a
// commit that wakes many live readers costs one or two markers, not one per reader.

// barrierWait bounds how long a marker may take to come back before the barrier gives up (the
// caller then reads the database): far above a healthy round trip, short beside a live read's
// timeout.
const barrierWait = 500 * time.Millisecond

// errNotListening is the barrier's answer while the listener is not connected.
var errNotListening = errors.New("postgres: the listener is not connected; notifications may be missed")

// barrierRound is one marker and the callers waiting for it.
type barrierRound struct {
	seq  uint64
	done chan struct{}
	err  error
}

// barriers is the state of the driver's listen barrier.
type barriers struct {
	mu        sync.Mutex
	listening bool          // the listener is connected and LISTENs on the barrier channel
	open      *barrierRound // collecting callers; its marker is not sent yet
	flight    *barrierRound // its marker is on its way (nil: none)
	sending   bool          // a sender goroutine runs
	seq       uint64        // the last marker's number
}

// listenMarkers returns how many markers the listen barrier has sent: one per round its callers
// shared.
func (d *Driver) listenMarkers() uint64 {
	d.barrier.mu.Lock()
	defer d.barrier.mu.Unlock()
	return d.barrier.seq
}

// barrierChannel is the channel of this process's markers: its listener alone LISTENs on it.
func (d *Driver) barrierChannel() string {
	return fmt.Sprintf("foldstream_b_%08x", uint32(lockKey(d.schema+"\x00"+d.node, "barrier")))
}

// ListenBarrier implements driver.ListenBarrier.
func (d *Driver) ListenBarrier(ctx context.Context) error {
	b := &d.barrier
	b.mu.Lock()
	if !b.listening {
		b.mu.Unlock()
		return errNotListening
	}
	r := b.open
	if r == nil {
		r = &barrierRound{done: make(chan struct{})}
		b.open = r
		if !b.sending {
			b.sending = true
			d.bg.Add(1)
			go d.sendBarriers()
		}
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendBarriers sends the open round's marker, waits for it to come back (or for barrierWait),
// and goes on with the round that opened meanwhile, until none is open.
func (d *Driver) sendBarriers() {
	defer d.bg.Done()
	b := &d.barrier
	for {
		b.mu.Lock()
		r := b.open
		if r == nil || !b.listening {
			b.sending = false
			b.mu.Unlock()
			if r != nil {
				d.endRounds(errNotListening)
			}
			return
		}
		b.open = nil
		b.seq++
		r.seq = b.seq
		b.flight = r
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), barrierWait)
		_, err := d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, d.barrierChannel(), strconv.FormatUint(r.seq, 10))
		if err == nil {
			select {
			case <-r.done:
			case <-ctx.Done():
				err = fmt.Errorf("postgres: the listener did not hear its marker within %v", barrierWait)
			case <-d.stop:
				err = errors.New("postgres: driver closed")
			}
		}
		cancel()
		if err != nil {
			d.finishRound(r, d.classify(fmt.Errorf("listen barrier: %w", err)))
		}
	}
}

// finishRound ends round r (when not ended yet) with err.
func (d *Driver) finishRound(r *barrierRound, err error) {
	b := &d.barrier
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flight == r {
		b.flight = nil
		r.err = err
		close(r.done)
	}
}

// heardMarker is the listener's: marker seq came back, so the round in flight (when it is that
// one) has every earlier commit's notification behind it.
func (d *Driver) heardMarker(payload string) {
	seq, err := strconv.ParseUint(payload, 10, 64)
	if err != nil {
		return
	}
	b := &d.barrier
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.flight; r != nil && r.seq <= seq {
		b.flight = nil
		close(r.done)
	}
}

// setListening records whether the listener is connected; when it is not, every waiting round
// fails at once (its marker could not come back).
func (d *Driver) setListening(on bool) {
	d.barrier.mu.Lock()
	d.barrier.listening = on
	d.barrier.mu.Unlock()
	if !on {
		d.endRounds(errNotListening)
	}
}

// endRounds fails the open round and the one in flight with err.
func (d *Driver) endRounds(err error) {
	b := &d.barrier
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range []*barrierRound{b.open, b.flight} {
		if r != nil {
			r.err = err
			close(r.done)
		}
	}
	b.open, b.flight = nil, nil
}

var _ driver.ListenBarrier = (*Driver)(nil)
