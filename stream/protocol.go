package stream

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
)

// The protocol view: the Durable Streams operations (create, append, close, delete, metadata,
// reads) over the same tables the event view uses. Package server maps these to HTTP.
//
// Representation (agreed with the event view):
//   - A protocol position is an integer; the wire offset is fmt.Sprintf("%016d_%016d", 0, pos).
//   - JSON streams (media type application/json): one entries row per flattened message, offset =
//     its 1-based position in the stream's offset sequence, record_start = the stream's tail
//     before the POST. Offsets are assigned through Tx.Mem from max(Tail, HighestAssigned)+1,
//     because the event view's ephemerals share the sequence.
//   - Byte streams: one entries row per POST, offset = end byte position, record_start = start.
//
// Every mutation runs as one write function on the store's single writer, so the producer
// decision table (spec §20), the Stream-Seq check, the data and the closure commit in one
// transaction, serialised per stream (the writer serialises all writes).
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

	id int64
}

// MediaType returns the lower-cased media type of a content type, parameters stripped.
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// IsJSONContentType reports whether a content type selects JSON mode.
func IsJSONContentType(contentType string) bool { return MediaType(contentType) == "application/json" }

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
		id:          r.ID,
	}
	if r.ExpiresAtMs.Valid {
		in.ExpiresAt = time.UnixMilli(r.ExpiresAtMs.Int64).UTC()
	}
	return in
}

// protoState is the protocol view's in-memory state: last-access times not yet persisted.
type protoState struct {
	mu        sync.Mutex
	access    map[int64]int64 // stream id -> last access (ms) seen in memory
	persisted map[int64]int64 // stream id -> last access (ms) last queued for persistence

	collectAfter int64 // CollectExpired resumes after this id; writer-owned
}

// accessPersistEvery bounds how stale streams.last_access_ms may be behind reads.
const accessPersistEvery = time.Second

func (s *Store) proto() *protoState {
	s.protoOnce.Do(func() {
		s.protoSt = &protoState{access: make(map[int64]int64), persisted: make(map[int64]int64)}
	})
	return s.protoSt
}

// lastAccess returns the effective last access of a row: the newer of the persisted and the
// in-memory time.
func (s *Store) lastAccess(r *streamRow) int64 {
	p := s.proto()
	p.mu.Lock()
	m := p.access[r.ID]
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
	if ms > p.access[r.ID] {
		p.access[r.ID] = ms
	}
	due := ms-max(p.persisted[r.ID], r.LastAccessMs) >= accessPersistEvery.Milliseconds()
	if due {
		p.persisted[r.ID] = ms
	}
	p.mu.Unlock()
	if !due || s.closed.Load() {
		return
	}
	id, created := r.ID, r.CreatedMs
	go func() {
		// Fire and forget: losing it only makes the stream look read a little earlier.
		_ = s.write(context.Background(), func(tx *Tx) error {
			_, err := tx.Exec(`UPDATE streams SET last_access_ms = max(last_access_ms, ?) WHERE id = ? AND created_ms = ?`,
				ms, id, created)
			return err
		})
	}()
}

// forgetAccess drops in-memory access state of a deleted stream.
func (s *Store) forgetAccess(id int64) {
	p := s.proto()
	p.mu.Lock()
	delete(p.access, id)
	delete(p.persisted, id)
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
func (s *Store) hasReferences(q querier, id int64, now time.Time) (bool, error) {
	kids, err := s.childRows(q, id)
	if err != nil {
		return false, err
	}
	for _, k := range kids {
		if k.State == 0 && !s.expired(k, now) {
			return true, nil
		}
		ref, err := s.hasReferences(q, k.ID, now)
		if err != nil {
			return false, err
		}
		if ref {
			return true, nil
		}
	}
	return false, nil
}

func (s *Store) childRows(q querier, id int64) ([]*streamRow, error) {
	rows, err := q.Query(`SELECT `+streamCols+` FROM streams WHERE forked_from = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("load forks: %w", err)
	}
	defer rows.Close()
	var out []*streamRow
	for rows.Next() {
		r, err := scanStream(rows)
		if err != nil {
			return nil, fmt.Errorf("load forks: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
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
func (s *Store) judge(q querier, r *streamRow, now time.Time) (liveness, error) {
	if r == nil {
		return streamMissing, nil
	}
	if r.State == 0 && !s.expired(r, now) {
		return streamLive, nil
	}
	ref, err := s.hasReferences(q, r.ID, now)
	if err != nil {
		return 0, err
	}
	if ref {
		return streamGone, nil
	}
	return streamMissing, nil
}

// loadLive loads the stream at path and returns it if live, else the matching protocol error.
func (s *Store) loadLive(q querier, path string, now time.Time) (*streamRow, error) {
	r, err := loadStreamByPath(q, path)
	if errors.Is(err, errNoStream) {
		return nil, perr(foldstream.CodeStreamNotFound, "stream %s not found", quotePath(path))
	}
	if err != nil {
		return nil, err
	}
	lv, err := s.judge(q, r, now)
	if err != nil {
		return nil, err
	}
	switch lv {
	case streamMissing:
		return nil, perr(foldstream.CodeStreamNotFound, "stream %s not found", quotePath(path))
	case streamGone:
		return nil, perr(foldstream.CodeStreamGone, "stream %s is deleted; its forks still read it", quotePath(path))
	}
	return r, nil
}

// hardDelete removes a stream, all its (dead) descendants, and then every soft-deleted or expired
// ancestor that no longer has references (the cascade of spec §8).
func (s *Store) hardDelete(tx *Tx, r *streamRow) error {
	if err := s.deleteSubtree(tx, r.ID, r.Path); err != nil {
		return err
	}
	parent := r.ForkedFrom
	for parent.Valid {
		p, err := loadStreamByID(tx, parent.Int64)
		if errors.Is(err, errNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.State == 0 && !s.expired(p, tx.Now()) {
			return nil
		}
		ref, err := s.hasReferences(tx, p.ID, tx.Now())
		if err != nil || ref {
			return err
		}
		if err := s.deleteSubtree(tx, p.ID, p.Path); err != nil {
			return err
		}
		parent = p.ForkedFrom
	}
	return nil
}

func (s *Store) deleteSubtree(tx *Tx, id int64, path string) error {
	kids, err := s.childRows(tx, id)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := s.deleteSubtree(tx, k.ID, k.Path); err != nil {
			return err
		}
	}
	for _, q := range []string{
		`DELETE FROM entries WHERE stream_id = ?`,
		`DELETE FROM producers WHERE stream_id = ?`,
		`DELETE FROM streams WHERE id = ?`,
	} {
		if _, err := tx.Exec(q, id); err != nil {
			return fmt.Errorf("delete stream: %w", err)
		}
	}
	tx.ForgetMem(id)
	// SQLite may hand a deleted stream's id to the next stream created, so every cache keyed by
	// the id (or naming it) forgets it: the event view's row cache (writer-owned), its
	// incarnation wake marks and ephemeral ring, and the protocol view's access times.
	delete(s.ev.rows, path)
	tx.AfterCommit(func() {
		// Again after the commit: an earlier write of this group may have cached the row in its
		// own AfterCommit hook, which ran before this one.
		delete(s.ev.rows, path)
		delete(s.ev.woken, id) // AfterCommit runs on the writer goroutine, which owns woken
		s.ev.ringMu.Lock()
		delete(s.ev.rings, id)
		s.ev.ringMu.Unlock()
		s.forgetAccess(id)
	})
	return nil
}

// memLoader loads a stream's writer-owned state from its row.
func memLoader(r *streamRow) func() (streamMem, error) {
	return func() (streamMem, error) { return streamMem{HighestAssigned: r.Tail, Tail: r.Tail}, nil }
}

// HeadStream returns a stream's metadata. It never renews a TTL.
func (s *Store) HeadStream(ctx context.Context, path string) (StreamInfo, error) {
	var info StreamInfo
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		r, err := s.loadLive(tx, path, s.clock.Now())
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
func (s *Store) DeleteStream(ctx context.Context, path string) error {
	return s.write(ctx, func(tx *Tx) error {
		r, err := s.loadLive(tx, path, tx.Now())
		if err != nil {
			return err
		}
		tx.Touch(r.ID)
		ref, err := s.hasReferences(tx, r.ID, tx.Now())
		if err != nil {
			return err
		}
		if ref {
			if _, err := tx.Exec(`UPDATE streams SET state = 1 WHERE id = ?`, r.ID); err != nil {
				return err
			}
			s.forgetCachedRow(tx, r.Path)
			return nil
		}
		return s.hardDelete(tx, r)
	})
}

// collectBatch bounds the streams one CollectExpired call examines, so it never holds the writer
// for long.
const collectBatch = 500

// CollectExpired reclaims the storage of streams that are gone for good: streams whose TTL or
// absolute expiry passed and soft-deleted streams, in both cases only once no live fork reads
// through them (spec §8, §15). Expiry is judged lazily on access anyway; this only frees space.
// It examines at most a few hundred candidates per call and returns how many streams it deleted
// (descendants and collected ancestors included). Call it periodically; foldstream serve does
// every minute.
func (s *Store) CollectExpired(ctx context.Context) (int, error) {
	deleted := 0
	err := s.write(ctx, func(tx *Tx) error {
		deleted = 0
		now := tx.Now()
		ms := now.UnixMilli()
		// Resume after the last id examined, so candidates that must stay (sources with live forks)
		// never hide the ones behind them.
		p := s.proto()
		rows, err := tx.Query(`SELECT `+streamCols+` FROM streams WHERE id > ? AND (state = 1 OR expires_at_ms <= ?
			OR (ttl_seconds IS NOT NULL AND last_access_ms + ttl_seconds * 1000 <= ?)) ORDER BY id LIMIT ?`,
			p.collectAfter, ms, ms, collectBatch)
		if err != nil {
			return fmt.Errorf("collect expired streams: %w", err)
		}
		var cands []*streamRow
		for rows.Next() {
			r, err := scanStream(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("collect expired streams: %w", err)
			}
			cands = append(cands, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("collect expired streams: %w", err)
		}
		if len(cands) < collectBatch {
			p.collectAfter = 0 // wrapped around: the next sweep starts over
		} else {
			p.collectAfter = cands[len(cands)-1].ID
		}
		for _, c := range cands {
			r, err := loadStreamByID(tx, c.ID) // an earlier cascade may have taken it
			if errors.Is(err, errNoStream) {
				continue
			}
			if err != nil {
				return err
			}
			lv, err := s.judge(tx, r, now)
			if err != nil {
				return err
			}
			if lv != streamMissing {
				continue
			}
			before, err := countStreams(tx)
			if err != nil {
				return err
			}
			tx.Touch(r.ID)
			if err := s.hardDelete(tx, r); err != nil {
				return err
			}
			after, err := countStreams(tx)
			if err != nil {
				return err
			}
			deleted += before - after
		}
		return nil
	})
	return deleted, err
}

func countStreams(q querier) (int, error) {
	var n int
	if err := q.QueryRow(`SELECT count(*) FROM streams`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count streams: %w", err)
	}
	return n, nil
}
