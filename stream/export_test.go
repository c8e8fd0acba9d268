package stream

import (
	"context"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/feeds"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/processors"
	"github.com/foldstream/foldstream/stream/internal/protocol"
	"github.com/foldstream/foldstream/stream/internal/sliced"
)

// CachedStreams returns how many streams the writer keeps in memory (read on the writer).
func CachedStreams(s *Store) int {
	n := 0
	_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
		n = s.k.CachedStreams()
		return nil
	})
	return n
}

// SetGatherWait replaces the writer's bounds on waiting for the callers it answered (gather).
func SetGatherWait(s *Store, d time.Duration) {
	_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
		s.k.SetGatherWait(d)
		return nil
	})
}

// AccessEntries returns how many streams the catalogue holds an in-memory access time for,
// and, when sweepAt > 0, sets the size at which NoteAccess sweeps (and its floor) to sweepAt.
func AccessEntries(s *Store, sweepAt int) int { return s.cat.AccessEntries(sweepAt) }

// rearmAlarms sets the alarm loop's timer for the earliest claim again (package processors).
func (s *Store) rearmAlarms() { processors.Rearm(s.procs) }

// retryDelay is the backoff after failures failed revives (package processors).
var retryDelay = processors.RetryDelay

// ringSnapshot is a copy of the ephemeral ring of the stream with id streamID (package feeds).
func (s *Store) ringSnapshot(streamID int64) []foldtype.Event {
	return feeds.RingSnapshot(s.pushes, streamID)
}

// splitJSON is the protocol face's split of a JSON body (package protocol).
var splitJSON = protocol.SplitJSON

// planSliced, appendSliced and listenBarrier are the protocol face's steps of an append in
// slices and of a live read on a shared database (package protocol).
func (s *Store) planSliced(req AppendRequest, msgs []rawjson.Message, msgErr error) *sliced.Record {
	return protocol.PlanSliced(s.protocol, req, msgs, msgErr)
}

func (s *Store) appendSliced(ctx context.Context, req AppendRequest, msgs []rawjson.Message, msgErr error, r *sliced.Record) (AppendResult, bool, error) {
	return protocol.AppendSliced(ctx, s.protocol, req, msgs, msgErr, r)
}

func (s *Store) listenBarrier(ctx context.Context) error {
	return protocol.ListenBarrier(ctx, s.protocol)
}
