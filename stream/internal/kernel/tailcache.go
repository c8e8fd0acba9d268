package kernel

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
)

// The tail cache (docs/store.md#live-reads, docs/postgres.md#live-reads).
//
// A live read (ReadRecords with Watch: SSE and long-poll) would otherwise read the database on
// every wake, once per reader, although the writer had the committed bytes at hand a moment
// before. Instead the store keeps, for the streams live readers watch on this node, the stream's
// row as of its latest commit this node knows of and its most recent records: an entry covers the
// positions (lo, row.Tail]. Every commit reaches the entry in commit order before its readers are
// woken — a local commit from the writer (the only commits there are on an exclusive driver),
// another node's from its notification, which carries the row and the records when they fit
// PostgreSQL's NOTIFY payload — and either extends it (its records start at the entry's tail),
// leaves it (an older commit the entry already covers) or drops it (anything else: records that
// did not fit, a gap, a deletion, a huge record written in slices, "anything may have changed").
// So an entry's tail is never behind a commit whose wake a reader could have missed, and a live
// read at or after lo is answered from memory, with no read of the database. An entry only ever
// holds committed records: the writer applies a commit to it after the commit returned (with
// synchronous=FULL, after its fsync).
//
// An entry starts from a live read of the database, and only when no wake for the stream came
// between the reader taking its change channel and finishing the read (the channel is still the
// registered one): the read's snapshot then holds every commit processed so far.

// tailCacheBytes bounds the record bytes one entry keeps (its oldest records go first; the last
// record is always kept).
const tailCacheBytes = 256 << 10

// tailCacheStreams bounds the number of entries (an arbitrary one goes when a new one needs room).
const tailCacheStreams = 4096

// tailCacheTotalBytes bounds the record bytes of all entries together: past it, an entry that
// grows keeps only its last record, and is dropped when even that does not fit.
const tailCacheTotalBytes = 64 << 20

// tailEntry is one stream's cached tail.
type tailEntry struct {
	row   driver.Stream   // the stream's row as of its latest known commit; row.Tail is the entry's tail
	lo    int64           // recs cover (lo, row.Tail]
	recs  []driver.Record // contiguous, in position order; appended to, never changed in place
	bytes int
	// dropped counts the records dropped from the front of recs' array since it was allocated.
	dropped int
}

// tailCache is the store's tail cache, guarded by Store.notifyMu (entries also without it).
type tailCache struct {
	byID   map[int64]*tailEntry
	byPath map[string]int64
	bytes  int // the record bytes of all entries
	// entries is len(byID), read without the lock: on an exclusive driver the writer collects a
	// commit's records for the cache only while it has entries. An entry seeded while a write
	// that did not collect them was in flight is dropped by that write's commit (its records do
	// not chain), so a stale read of entries costs a read of the database, never a wrong answer.
	entries atomic.Int64
}

func (c *tailCache) drop(id int64) {
	e := c.byID[id]
	if e == nil {
		return
	}
	delete(c.byID, id)
	c.bytes -= e.bytes
	c.entries.Store(int64(len(c.byID)))
	if c.byPath[e.row.Path] == id {
		delete(c.byPath, e.row.Path)
	}
}

// inUse reports whether the cache may have entries (read without notifyMu).
func (c *tailCache) inUse() bool { return c.entries.Load() > 0 }

// Chains reports whether recs cover (from, tail] contiguously.
func Chains(from int64, recs []driver.Record, tail int64) bool {
	at := from
	for _, r := range recs {
		if r.Start != at || r.End <= r.Start {
			return false
		}
		at = r.End
	}
	return at == tail
}

// cacheable reports whether a stream's row can stand for it in the cache: live and not a fork
// (a fork's reads walk its source's records).
func cacheable(r *driver.Stream) bool {
	return r != nil && r.State == 0 && !r.ForkedFrom.Valid
}

// applyCommit brings the stream's entry up to a commit: row is the stream's row after it (nil
// when unknown: the stream was deleted, or the records did not travel) and recs the durable
// records it appended. Called with notifyMu held, before the stream's waiters are woken.
func (s *Store) applyCommit(id int64, row *driver.Stream, recs []driver.Record) {
	c := &s.tails
	e := c.byID[id]
	if e == nil {
		return
	}
	if row == nil || row.ID != id {
		c.drop(id)
		return
	}
	hi := e.row.Tail
	if len(recs) == 0 && row.Tail == hi && sameForReads(row, &e.row) {
		return // nothing a read sees changed (a stream's creation, a read that found nothing new)
	}
	switch {
	case row.Tail < hi || (len(recs) > 0 && row.Tail == hi):
		return // a commit the entry already holds (it started from a later read)
	case len(recs) == 0 || !cacheable(row) || !Chains(hi, recs, row.Tail):
		// A gap, records that did not travel, or a change without records (closing): read.
		c.drop(id)
		return
	}
	e.row = *row
	before := e.bytes
	for _, r := range recs {
		r.Keys = nil
		e.recs = append(e.recs, r)
		e.bytes += len(r.Body) + len(r.Frames)
	}
	budget := tailCacheBytes
	if c.bytes+e.bytes-before > tailCacheTotalBytes {
		budget = 0 // the cache is full: keep the last record only
	}
	drop := 0
	for drop < len(e.recs)-1 && e.bytes > budget {
		e.bytes -= len(e.recs[drop].Body) + len(e.recs[drop].Frames)
		drop++
	}
	if drop > 0 {
		// Readers may still hold a slice of the records: they are left as they are, and the
		// entry moves past them; once as many were dropped as are kept, the kept ones move to a
		// fresh array (a copy per record at most once, however long the stream is followed).
		e.recs = e.recs[drop:]
		e.dropped += drop
		if e.dropped >= len(e.recs) {
			e.recs = append([]driver.Record(nil), e.recs...)
			e.dropped = 0
		}
	}
	c.bytes += e.bytes - before
	if c.bytes > tailCacheTotalBytes {
		c.drop(id)
		return
	}
	if len(e.recs) > 0 {
		e.lo = e.recs[0].Start
	}
}

// sameForReads reports whether two rows of one stream answer a read alike.
func sameForReads(a, b *driver.Stream) bool {
	return a.ID == b.ID && a.Path == b.Path && a.ContentType == b.ContentType && a.State == b.State &&
		a.TTLSeconds == b.TTLSeconds && a.ExpiresAtMs == b.ExpiresAtMs && a.Closed == b.Closed &&
		a.ForkedFrom == b.ForkedFrom && a.Paused == b.Paused && a.Tail == b.Tail
}

// SeedTail starts the stream's entry from a live read's row, when no wake came since the reader
// took ch (taken before the read).
func (s *Store) SeedTail(row *driver.Stream, ch <-chan struct{}) {
	if !cacheable(row) {
		return
	}
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if cur, ok := s.notify[row.ID]; !ok || (<-chan struct{})(cur) != ch {
		return // woken since: the read may be behind a commit already processed
	}
	c := &s.tails
	if c.byID == nil {
		c.byID = make(map[int64]*tailEntry)
		c.byPath = make(map[string]int64)
	}
	if c.byID[row.ID] != nil {
		return
	}
	if old, ok := c.byPath[row.Path]; ok {
		c.drop(old) // an earlier stream at the path
	}
	for len(c.byID) >= tailCacheStreams {
		for id := range c.byID {
			c.drop(id)
			break
		}
	}
	c.byID[row.ID] = &tailEntry{row: *row, lo: row.Tail}
	c.byPath[row.Path] = row.ID
	c.entries.Store(int64(len(c.byID)))
}

// dropAllTails empties the cache ("anything may have changed"). Called with notifyMu held.
func (s *Store) dropAllTails() {
	s.tails.byID, s.tails.byPath, s.tails.bytes = nil, nil, 0
	s.tails.entries.Store(0)
}

// CachedTail returns the tail cache entry of the stream at path when it covers a read after
// position after (any position with atTail) and usable accepts its row: the row, the entry's
// records and the stream's change channel. The channel is taken under the same lock as the entry
// is read, so no commit is missed. ok is false when the cache cannot answer (no entry, a position
// before the entry's records, a row usable refuses); usable runs under the lock and must not
// block. The records are never changed in place: applyCommit appends or copies.
func (s *Store) CachedTail(path string, after int64, atTail bool, usable func(row *driver.Stream) bool) (row driver.Stream, recs []driver.Record, changed chan struct{}, ok bool) {
	if !s.tails.inUse() {
		return row, nil, nil, false
	}
	s.notifyMu.Lock()
	id, found := s.tails.byPath[path]
	e := s.tails.byID[id]
	if !found || e == nil || (!atTail && (after < e.lo || after > e.row.Tail)) || !usable(&e.row) {
		s.notifyMu.Unlock()
		return row, nil, nil, false
	}
	row = e.row
	recs = e.recs
	ch, has := s.notify[id]
	if !has {
		ch = make(chan struct{})
		s.notify[id] = ch
	}
	s.notifyMu.Unlock()
	return row, recs, ch, true
}

// MemRecords is a driver.Reader over a cached entry's records, for readJSON and readBytes on a
// stream that is not a fork (they call Records only).
type MemRecords struct {
	driver.Reader
	Recs []driver.Record // the entry's records, in order
}

// Records calls fn with each record of m that ends after after, in order.
func (m MemRecords) Records(_ context.Context, _ int64, after int64, fn func(driver.Record) (bool, error)) error {
	for _, r := range m.Recs {
		if r.End <= after {
			continue
		}
		more, err := fn(r)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// remoteTail returns what another node's commit n did to a stream, for its tail cache entry: the
// notification's row and records when they extend the entry (or are older than it); otherwise —
// the records did not travel, a gap, a change without records — the row and the records after the
// entry's tail read once from the database here, so that the stream's live readers on this node
// are answered from the entry rather than each reading the database. Nil when there is no entry,
// or the read failed or holds more than an entry keeps (the entry is then dropped).
func (s *Store) remoteTail(n driver.Notification) (*driver.Stream, []driver.Record) {
	if s.exclusive {
		return n.Stream, n.Records
	}
	s.notifyMu.Lock()
	e := s.tails.byID[n.StreamID]
	var hi int64
	if e != nil {
		hi = e.row.Tail
	}
	s.notifyMu.Unlock()
	if e == nil {
		return n.Stream, n.Records
	}
	if r := n.Stream; r != nil && r.ID == n.StreamID && (r.Tail < hi || (len(n.Records) > 0 && (r.Tail == hi || Chains(hi, n.Records, r.Tail))) ||
		(len(n.Records) == 0 && r.Tail == hi && sameForReads(r, &e.row))) {
		return n.Stream, n.Records
	}
	ctx, cancel := context.WithTimeout(context.Background(), tailReadTimeout)
	defer cancel()
	var row *driver.Stream
	var recs []driver.Record
	err := s.Read(ctx, func(q driver.Reader) error {
		r, err := q.StreamByID(ctx, n.StreamID)
		if err != nil {
			return err
		}
		row, recs = &r, nil
		size := 0
		return q.Records(ctx, n.StreamID, hi, func(rec driver.Record) (bool, error) {
			size += len(rec.Body) + len(rec.Frames)
			if size > tailCacheBytes {
				recs = nil
				row = nil // more than an entry keeps: drop it
				return false, nil
			}
			rec.Keys = nil
			rec.Body, rec.Frames = bytes.Clone(rec.Body), bytes.Clone(rec.Frames) // the driver may reuse its memory
			recs = append(recs, rec)
			return true, nil
		})
	})
	if err != nil {
		return nil, nil
	}
	return row, recs
}

// tailReadTimeout bounds remoteTail's read (it runs on the listener's goroutine).
const tailReadTimeout = 5 * time.Second
