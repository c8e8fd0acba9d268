package stream

import (
	"context"
	"errors"
	"fmt"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// The protocol view: the Durable Streams operations (create, append, close, delete, metadata,
// reads) over the same tables the event view uses. Package server maps these to HTTP.
//
// Representation (shared with the event view; storage in the kernel's record.go and docs/store.md#storage-one-row-per-record):
//   - A protocol position is an integer; the wire offset is fmt.Sprintf("%016d_%016d", 0, pos).
//   - JSON streams (media type application/json): a POST is one record of flattened messages,
//     each at its offset in the stream's offset sequence, assigned from HighestAssigned+1 because
//     the event view's ephemerals share the sequence.
//   - Byte streams: a POST is one record covering the byte positions (start, end].
//
// Every mutation runs as one write function on the store's single writer, so the producer
// decision table (docs/store.md#idempotent-producers), the Stream-Seq check, the data and the
// closure commit in one transaction, serialised per stream (the writer serialises all writes).
//
// Last access for sliding TTLs: a GET must renew the TTL but must not cost an fsync. Reads record
// the access time in memory (protoState.access); the in-memory time counts for expiry at once and
// is persisted to streams.last_access_ms lazily, at most about once per second per stream, by a
// fire-and-forget write. POSTs persist it in their own transaction. After a crash a stream may
// therefore look up to about a second less recently read than it was.

// StreamInfo is a stream's protocol metadata.
type StreamInfo struct {
	// Path is the stream's path in the store.
	Path string
	// ContentType is the content type exactly as given at creation.
	ContentType string
	// JSON reports JSON mode (media type application/json).
	JSON bool
	// TTLSeconds is the sliding TTL when HasTTL.
	TTLSeconds int64
	// HasTTL reports whether the stream has a sliding TTL.
	HasTTL bool
	// ExpiresAt is the absolute expiry; zero when none.
	ExpiresAt time.Time
	// Closed reports whether the stream is closed.
	Closed bool
	// Tail is the position after the last record.
	Tail int64
	// CreatedMs is the creation time in Unix milliseconds (distinguishes re-created streams).
	CreatedMs int64
	// Paused reports whether the stream is paused (docs/store.md#pausing-a-stream); PauseReason
	// is the reason appends are refused with.
	Paused      bool
	PauseReason string

	id int64
}

func infoOf(r *streamRow) StreamInfo {
	in := StreamInfo{
		Path:        r.Path,
		ContentType: r.ContentType,
		JSON:        IsJSONContentType(r.ContentType),
		HasTTL:      r.TTLSeconds.Valid,
		TTLSeconds:  r.TTLSeconds.Int64,
		Closed:      r.Closed,
		Tail:        r.Tail,
		CreatedMs:   r.CreatedMs,
		Paused:      r.Paused.Valid,
		PauseReason: r.Paused.String,
		id:          r.ID,
	}
	if r.ExpiresAtMs.Valid {
		in.ExpiresAt = time.UnixMilli(r.ExpiresAtMs.Int64).UTC()
	}
	return in
}

// protoState is the protocol view's in-memory state: last-access times not yet persisted.
//
// An entry lives while its stream can still be alive by it. The effective last access is the
// newer of the entry and the row's persisted time; once the entry's time plus the stream's TTL has
// passed, dropping the entry changes nothing: either the persisted time is newer (a POST renewed
// the stream) and decides alone, or it is older and the stream has expired either way. So
// noteAccess drops such entries whenever the map has doubled since its last sweep. Deleting a
// stream on this node drops its entry at once; a stream deleted by another node sharing the
// database expires by its TTL and is swept then. The map so holds at most about twice the
// streams read within their TTL.
type protoState struct {
	mu       sync.Mutex
	access   map[int64]accessEntry // stream id -> its reads' last access
	sweepAt  int                   // sweep when the map reaches this size
	sweepMin int                   // the size below which it never sweeps (accessSweepMin)
}

// accessEntry is one stream's last read access as seen in memory.
type accessEntry struct {
	seen   int64 // last access (ms) seen in memory
	queued int64 // last access (ms) last queued for persistence
	ttlMs  int64 // the stream's sliding TTL, which never changes
}

// accessPersistEvery bounds how stale streams.last_access_ms may be behind reads.
const accessPersistEvery = time.Second

// accessSweepMin is the map size below which noteAccess never sweeps.
const accessSweepMin = 1024

func (s *Store) proto() *protoState {
	s.protoOnce.Do(func() {
		s.protoSt = &protoState{access: make(map[int64]accessEntry), sweepAt: accessSweepMin, sweepMin: accessSweepMin}
	})
	return s.protoSt
}

// lastAccess returns the effective last access of a row: the newer of the persisted and the
// in-memory time.
func (s *Store) lastAccess(r *streamRow) int64 {
	p := s.proto()
	p.mu.Lock()
	m := p.access[r.ID].seen
	p.mu.Unlock()
	return max(m, r.LastAccessMs)
}

// noteAccess records a read access (renewing a sliding TTL) and persists it lazily.
func (s *Store) noteAccess(r *streamRow, now time.Time) {
	if !r.TTLSeconds.Valid {
		return // only sliding TTLs care
	}
	ms := now.UnixMilli()
	p := s.proto()
	p.mu.Lock()
	e, ok := p.access[r.ID]
	if !ok && len(p.access) >= p.sweepAt {
		p.sweep(ms)
	}
	e.ttlMs = r.TTLSeconds.Int64 * 1000
	if ms > e.seen {
		e.seen = ms
	}
	due := ms-max(e.queued, r.LastAccessMs) >= accessPersistEvery.Milliseconds()
	if due {
		e.queued = ms
	}
	p.access[r.ID] = e
	p.mu.Unlock()
	if !due || s.k.Closed() {
		return
	}
	id := r.ID
	go func() {
		// Fire and forget: losing it only makes the stream look read a little earlier.
		_ = s.k.Write(context.Background(), func(t *kernel.Tx) error {
			// Ids are never reused, so the id names this stream or none.
			return t.Driver().UpdateStream(t.Context(), id, driver.StreamUpdate{LastAccessMs: &ms})
		})
	}()
}

// sweep drops the entries of streams that have expired by their entry at ms (see protoState),
// and sets the next sweep at twice the size that remains. p.mu is held.
func (p *protoState) sweep(ms int64) {
	for id, e := range p.access {
		if ms >= e.seen+e.ttlMs {
			delete(p.access, id)
		}
	}
	p.sweepAt = max(p.sweepMin, 2*len(p.access))
}

// forgetAccess drops in-memory access state of a deleted stream.
func (s *Store) forgetAccess(id int64) {
	p := s.proto()
	p.mu.Lock()
	delete(p.access, id)
	p.mu.Unlock()
}

// expired reports whether the row's TTL or absolute expiry has passed at now.
func (s *Store) expired(r *streamRow, now time.Time) bool {
	ms := now.UnixMilli()
	if r.ExpiresAtMs.Valid && ms >= r.ExpiresAtMs.Int64 {
		return true
	}
	if r.TTLSeconds.Valid && ms >= s.lastAccess(r)+r.TTLSeconds.Int64*1000 {
		return true
	}
	return false
}

// hasReferences reports whether a live (unexpired, or itself referenced) fork still reads through
// stream id.
func (s *Store) hasReferences(ctx context.Context, q driver.Reader, id int64, now time.Time) (bool, error) {
	kids, err := q.ChildStreams(ctx, id)
	if err != nil {
		return false, err
	}
	for i := range kids {
		k := &kids[i]
		if k.State == 0 && !s.expired(k, now) {
			return true, nil
		}
		ref, err := s.hasReferences(ctx, q, k.ID, now)
		if err != nil {
			return false, err
		}
		if ref {
			return true, nil
		}
	}
	return false, nil
}

// liveness is what access to a stream row finds.
type liveness int

const (
	streamLive liveness = iota
	streamMissing
	streamGone
)

// judge classifies a loaded row (nil = no row): live, missing (absent or expired without forks),
// or gone (soft-deleted, or expired with forks still reading through it).
func (s *Store) judge(ctx context.Context, q driver.Reader, r *streamRow, now time.Time) (liveness, error) {
	if r == nil {
		return streamMissing, nil
	}
	if r.State == 0 && !s.expired(r, now) {
		return streamLive, nil
	}
	ref, err := s.hasReferences(ctx, q, r.ID, now)
	if err != nil {
		return 0, err
	}
	if ref {
		return streamGone, nil
	}
	return streamMissing, nil
}

// notLive is the protocol error for a stream that is not live.
func notLive(lv liveness, path string) error {
	if lv == streamGone {
		return perr(foldtype.CodeStreamGone, "stream %s is deleted; its forks still read it", quotePath(path))
	}
	return perr(foldtype.CodeStreamNotFound, "stream %s not found", quotePath(path))
}

// loadLive loads the stream at path in a read transaction and returns it if live, else the
// matching protocol error.
func (s *Store) loadLive(ctx context.Context, q driver.Reader, path string, now time.Time) (*streamRow, error) {
	r, err := kernel.LoadStreamByPath(ctx, q, path)
	if errors.Is(err, errNoStream) {
		return nil, notLive(streamMissing, path)
	}
	if err != nil {
		return nil, err
	}
	lv, err := s.judge(ctx, q, r, now)
	if err != nil {
		return nil, err
	}
	if lv != streamLive {
		return nil, notLive(lv, path)
	}
	return r, nil
}

// liveStream is loadLive inside the writer: the writer's state of the stream at path if live.
func (s *Store) liveStream(t *kernel.Tx, path string) (*kernel.StreamState, error) {
	m, err := t.Stream(path)
	if errors.Is(err, errNoStream) {
		return nil, notLive(streamMissing, path)
	}
	if err != nil {
		return nil, err
	}
	lv, err := s.judge(t.Context(), t.Driver(), &m.Row, t.Now())
	if err != nil {
		return nil, err
	}
	if lv != streamLive {
		return nil, notLive(lv, path)
	}
	return m, nil
}

// hardDelete removes a stream, all its (dead) descendants, and then every soft-deleted or expired
// ancestor that no longer has references (docs/store.md#forks).
func (s *Store) hardDelete(t *kernel.Tx, r *streamRow) error {
	if err := s.deleteSubtree(t, r.ID, r.Path); err != nil {
		return err
	}
	parent := r.ForkedFrom
	for parent.Valid {
		p, err := kernel.LoadStreamByID(t.Context(), t.Driver(), parent.Int64)
		if errors.Is(err, errNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.State == 0 && !s.expired(p, t.Now()) {
			return nil
		}
		ref, err := s.hasReferences(t.Context(), t.Driver(), p.ID, t.Now())
		if err != nil || ref {
			return err
		}
		if err := s.deleteSubtree(t, p.ID, p.Path); err != nil {
			return err
		}
		parent = p.ForkedFrom
	}
	return nil
}

func (s *Store) deleteSubtree(t *kernel.Tx, id int64, path string) error {
	kids, err := t.Driver().ChildStreams(t.Context(), id)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := s.deleteSubtree(t, k.ID, k.Path); err != nil {
			return err
		}
	}
	if err := t.Driver().DeleteStream(t.Context(), id); err != nil {
		return fmt.Errorf("delete stream: %w", err)
	}
	if err := s.endIncarnation(t, id, path); err != nil {
		return err
	}
	t.Forget(path, id)
	// Every in-memory state keyed by the id goes with the stream: its incarnation wake mark and
	// the protocol view's access times.
	t.AfterCommit(func() {
		s.k.Unmark(id) // after-commit hooks run on the writer goroutine, which owns ws
		s.forgetAccess(id)
	})
	return nil
}

// endIncarnation ends what belongs to one incarnation of the stream at path, in the deleting
// transaction: its processors' checkpoints and claims go (a stream created at the path again
// starts its processors from their initial state at offset 0), and once the delete commits its
// ephemeral ring is cleared and its subscriptions end with STREAM_DELETED. Every delete path —
// soft or hard, by DeleteStream, expiry collection or a create replacing an expired stream —
// calls it (docs/store.md#deleting-a-stream).
func (s *Store) endIncarnation(t *kernel.Tx, id int64, path string) error {
	if err := t.Driver().DeleteProcessorState(t.Context(), path); err != nil {
		return err
	}
	t.AfterCommit(func() {
		s.forgetRing(id)
		s.endSubscriptions(path, foldtype.NewError(foldtype.CodeStreamDeleted, map[string]any{"path": path},
			"stream %s was deleted; its subscriptions, checkpoints and claims ended with it", quotePath(path)))
	})
	return nil
}

// headStream is [Protocol.HeadStream] and [Events.HeadStream].
func (s *Store) headStream(ctx context.Context, path string) (StreamInfo, error) {
	var info StreamInfo
	err := s.k.Read(ctx, func(q driver.Reader) error {
		r, err := s.loadLive(ctx, q, path, s.clock.Now())
		if err != nil {
			return err
		}
		info = infoOf(r)
		return nil
	})
	return info, err
}

// DeleteStream deletes a stream: soft while live forks read through it (the path stays reserved and
// answers "gone"), hard otherwise, collecting soft-deleted ancestors left without forks.
func (p *Protocol) DeleteStream(ctx context.Context, path string) error {
	s := p.s
	return s.k.Write(ctx, func(t *kernel.Tx) error {
		m, err := s.liveStream(t, path)
		if err != nil {
			return err
		}
		t.Changed(m.Row.ID, m.Row.Path)
		ref, err := s.hasReferences(t.Context(), t.Driver(), m.Row.ID, t.Now())
		if err != nil {
			return err
		}
		if ref {
			state := 1
			if err := t.Driver().UpdateStream(t.Context(), m.Row.ID, driver.StreamUpdate{State: &state}); err != nil {
				return err
			}
			m.Row.State = state
			return s.endIncarnation(t, m.Row.ID, m.Row.Path)
		}
		row := m.Row
		row.Tail = m.Tail
		return s.hardDelete(t, &row)
	})
}

// collectBatch bounds the streams one CollectExpired call examines, so it never holds the writer
// for long.
const collectBatch = 500

// CollectExpired reclaims the storage of streams that are gone for good: streams whose TTL or
// absolute expiry passed and soft-deleted streams, in both cases only once no live fork reads
// through them (docs/store.md#forks). Expiry is judged lazily on access anyway; this only frees
// space. It examines at most a few hundred candidates per call and returns how many streams it
// deleted (descendants and collected ancestors included). Call it periodically; foldstream serve
// does every minute.
func (p *Protocol) CollectExpired(ctx context.Context) (int, error) {
	s := p.s
	deleted := 0
	err := s.k.Write(ctx, func(t *kernel.Tx) error {
		deleted = 0
		now := t.Now()
		// Resume after the last id examined, so candidates that must stay (sources with live forks)
		// never hide the ones behind them.
		cands, err := t.Driver().CollectCandidates(t.Context(), s.ls.collectAfter, now.UnixMilli(), collectBatch)
		if err != nil {
			return fmt.Errorf("collect expired streams: %w", err)
		}
		next := int64(0) // wrapped around: the next sweep starts over
		if len(cands) >= collectBatch {
			next = cands[len(cands)-1].ID
		}
		t.AfterCommit(func() { s.ls.collectAfter = next })
		for _, c := range cands {
			r, err := kernel.LoadStreamByID(t.Context(), t.Driver(), c.ID) // an earlier cascade may have taken it
			if errors.Is(err, errNoStream) {
				continue
			}
			if err != nil {
				return err
			}
			lv, err := s.judge(t.Context(), t.Driver(), r, now)
			if err != nil {
				return err
			}
			if lv != streamMissing {
				continue
			}
			before, err := t.Driver().CountStreams(t.Context())
			if err != nil {
				return err
			}
			if err := s.hardDelete(t, r); err != nil {
				return err
			}
			after, err := t.Driver().CountStreams(t.Context())
			if err != nil {
				return err
			}
			deleted += before - after
		}
		return nil
	})
	return deleted, err
}

// ID returns the stream's identity in the store: a path deleted and created again gets a new one,
// so a host can tell the stream its engine follows from a later stream at the same path.
func (in StreamInfo) ID() int64 { return in.id }
