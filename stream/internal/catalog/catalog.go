// Package catalog is what both faces of the store mean by a stream, below either face and above
// the kernel (docs/store.md#the-kernel-and-its-layers): a stream's metadata ([StreamInfo]),
// whether it is live (deletion, TTL and absolute expiry, forks that still read a deleted stream),
// the catalogue of streams ([Catalog.HeadStream], [Catalog.ListStreams]), the one decoding of a
// stored message into an event, the name rules and the store's refusals. The faces are layers on
// it and never import each other: what one face must hear of the other's writes goes through the
// hooks a face registers here ([Hooks]).
package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Catalog is the store's catalogue of streams: what both faces read of a stream's row and its
// liveness, and the hooks the faces register with each other (hooks.go). One per store, made
// with [New] while the store opens; safe for concurrent use.
type Catalog struct {
	k     *kernel.Store
	clock foldtype.Clock
	hooks Hooks

	accessOnce sync.Once
	accessSt   *accessState // the reads' last-access times not yet persisted
}

// New returns the catalogue of the streams of kernel k, whose clock is clock.
func New(k *kernel.Store, clock foldtype.Clock) *Catalog { return &Catalog{k: k, clock: clock} }

// streamRow is a stream's row.
type streamRow = driver.Stream

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

// InfoOf is the metadata of the stream whose row is r.
func InfoOf(r *streamRow) StreamInfo {
	in := StreamInfo{
		Path:        r.Path,
		ContentType: r.ContentType,
		JSON:        kernel.IsJSONContentType(r.ContentType),
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

// accessState is what the catalogue keeps in memory of reads: last-access times not yet
// persisted.
//
// An entry lives while its stream can still be alive by it. The effective last access is the
// newer of the entry and the row's persisted time; once the entry's time plus the stream's TTL has
// passed, dropping the entry changes nothing: either the persisted time is newer (a POST renewed
// the stream) and decides alone, or it is older and the stream has expired either way. So
// NoteAccess drops such entries whenever the map has doubled since its last sweep. Deleting a
// stream on this node drops its entry at once; a stream deleted by another node sharing the
// database expires by its TTL and is swept then. The map so holds at most about twice the
// streams read within their TTL.
type accessState struct {
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

// accessSweepMin is the map size below which NoteAccess never sweeps.
const accessSweepMin = 1024

// access returns the in-memory access state, made on first use.
func (c *Catalog) access() *accessState {
	c.accessOnce.Do(func() {
		c.accessSt = &accessState{access: make(map[int64]accessEntry), sweepAt: accessSweepMin, sweepMin: accessSweepMin}
	})
	return c.accessSt
}

// lastAccess returns the effective last access of a row: the newer of the persisted and the
// in-memory time.
func (c *Catalog) lastAccess(r *streamRow) int64 {
	p := c.access()
	p.mu.Lock()
	m := p.access[r.ID].seen
	p.mu.Unlock()
	return max(m, r.LastAccessMs)
}

// NoteAccess records a read access (renewing a sliding TTL) and persists it lazily.
func (c *Catalog) NoteAccess(r *streamRow, now time.Time) {
	if !r.TTLSeconds.Valid {
		return // only sliding TTLs care
	}
	ms := now.UnixMilli()
	p := c.access()
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
	if !due || c.k.Closed() {
		return
	}
	id := r.ID
	go func() {
		// Fire and forget: losing it only makes the stream look read a little earlier.
		_ = c.k.Write(context.Background(), func(t *kernel.Tx) error {
			// Ids are never reused, so the id names this stream or none.
			return t.Driver().UpdateStream(t.Context(), id, driver.StreamUpdate{LastAccessMs: &ms})
		})
	}()
}

// sweep drops the entries of streams that have expired by their entry at ms (see accessState),
// and sets the next sweep at twice the size that remains. p.mu is held.
func (p *accessState) sweep(ms int64) {
	for id, e := range p.access {
		if ms >= e.seen+e.ttlMs {
			delete(p.access, id)
		}
	}
	p.sweepAt = max(p.sweepMin, 2*len(p.access))
}

// ForgetAccess drops in-memory access state of a deleted stream.
func (c *Catalog) ForgetAccess(id int64) {
	p := c.access()
	p.mu.Lock()
	delete(p.access, id)
	p.mu.Unlock()
}

// Expired reports whether the row's TTL or absolute expiry has passed at now.
func (c *Catalog) Expired(r *streamRow, now time.Time) bool {
	ms := now.UnixMilli()
	if r.ExpiresAtMs.Valid && ms >= r.ExpiresAtMs.Int64 {
		return true
	}
	if r.TTLSeconds.Valid && ms >= c.lastAccess(r)+r.TTLSeconds.Int64*1000 {
		return true
	}
	return false
}

// HasReferences reports whether a live (unexpired, or itself referenced) fork still reads through
// stream id.
func (c *Catalog) HasReferences(ctx context.Context, q driver.Reader, id int64, now time.Time) (bool, error) {
	kids, err := q.ChildStreams(ctx, id)
	if err != nil {
		return false, err
	}
	for i := range kids {
		k := &kids[i]
		if k.State == 0 && !c.Expired(k, now) {
			return true, nil
		}
		ref, err := c.HasReferences(ctx, q, k.ID, now)
		if err != nil {
			return false, err
		}
		if ref {
			return true, nil
		}
	}
	return false, nil
}

// Liveness is what access to a stream row finds.
type Liveness int

const (
	Live    Liveness = iota // the stream is there and alive
	Missing                 // absent, or expired with no fork reading it
	Gone                    // deleted or expired, and a live fork still reads it
)

// Judge classifies a loaded row (nil = no row): live, missing (absent or expired without forks),
// or gone (soft-deleted, or expired with forks still reading through it).
func (c *Catalog) Judge(ctx context.Context, q driver.Reader, r *streamRow, now time.Time) (Liveness, error) {
	if r == nil {
		return Missing, nil
	}
	if r.State == 0 && !c.Expired(r, now) {
		return Live, nil
	}
	ref, err := c.HasReferences(ctx, q, r.ID, now)
	if err != nil {
		return 0, err
	}
	if ref {
		return Gone, nil
	}
	return Missing, nil
}

// NotLive is the refusal of a stream at path that is not live: STREAM_GONE or STREAM_NOT_FOUND.
func NotLive(lv Liveness, path string) error {
	if lv == Gone {
		return Perr(foldtype.CodeStreamGone, "stream %s is deleted; its forks still read it", QuotePath(path))
	}
	return Perr(foldtype.CodeStreamNotFound, "stream %s not found", QuotePath(path))
}

// LoadLive loads the stream at path in a read transaction and returns it if live, else the
// matching protocol error.
func (c *Catalog) LoadLive(ctx context.Context, q driver.Reader, path string, now time.Time) (*streamRow, error) {
	r, err := kernel.LoadStreamByPath(ctx, q, path)
	if errors.Is(err, driver.ErrNoStream) {
		return nil, NotLive(Missing, path)
	}
	if err != nil {
		return nil, err
	}
	lv, err := c.Judge(ctx, q, r, now)
	if err != nil {
		return nil, err
	}
	if lv != Live {
		return nil, NotLive(lv, path)
	}
	return r, nil
}

// LiveStream is LoadLive inside the writer: the writer's state of the stream at path if live.
func (c *Catalog) LiveStream(t *kernel.Tx, path string) (*kernel.StreamState, error) {
	m, err := t.Stream(path)
	if errors.Is(err, driver.ErrNoStream) {
		return nil, NotLive(Missing, path)
	}
	if err != nil {
		return nil, err
	}
	lv, err := c.Judge(t.Context(), t.Driver(), &m.Row, t.Now())
	if err != nil {
		return nil, err
	}
	if lv != Live {
		return nil, NotLive(lv, path)
	}
	return m, nil
}

// HeadStream returns the metadata of the live stream at path, or the refusal of a stream that is
// not live (STREAM_NOT_FOUND, STREAM_GONE). It never renews a TTL.
func (c *Catalog) HeadStream(ctx context.Context, path string) (StreamInfo, error) {
	var info StreamInfo
	err := c.k.Read(ctx, func(q driver.Reader) error {
		r, err := c.LoadLive(ctx, q, path, c.clock.Now())
		if err != nil {
			return err
		}
		info = InfoOf(r)
		return nil
	})
	return info, err
}

// ID returns the stream's identity in the store: a path deleted and created again gets a new one,
// so a host can tell the stream its engine follows from a later stream at the same path.
func (in StreamInfo) ID() int64 { return in.id }

// ListOptions selects one page of [Catalog.ListStreams].
type ListOptions struct {
	// Prefix keeps only paths that start with it (byte-wise). Empty lists every stream.
	Prefix string
	// After keeps only paths byte-wise greater than it: pass the last path of the previous page.
	After string
	// Limit caps the page. Defaults to DefaultListLimit; at most MaxListLimit.
	Limit int
}

// Page sizes of ListStreams.
const (
	// DefaultListLimit is the page size when ListOptions.Limit is zero or negative.
	DefaultListLimit = 100
	// MaxListLimit is the largest page ListStreams returns.
	MaxListLimit = 1000
)

// ListStreams returns one page of the live streams opts selects, in path order (byte-wise).
// Deleted and expired streams are left out; listing never renews a TTL.
func (c *Catalog) ListStreams(ctx context.Context, opts ListOptions) ([]StreamInfo, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	// The prefix becomes a range on the path index: prefix <= path < upper.
	lower := max(opts.Prefix, opts.After)
	upper, bounded := PrefixUpperBound(opts.Prefix)
	now := c.clock.Now()
	var out []StreamInfo
	err := c.k.Read(ctx, func(q driver.Reader) error {
		// After is exclusive (the last path already seen); the prefix itself is a possible path.
		lq := driver.ListQuery{From: lower, Inclusive: opts.After == "" || opts.Prefix > opts.After}
		if bounded {
			lq.Below = upper
		}
		for len(out) < limit {
			want := limit - len(out)
			lq.Limit = want
			rows, err := q.ListStreams(ctx, lq)
			if err != nil {
				return fmt.Errorf("list streams: %w", err)
			}
			for i := range rows {
				r := &rows[i]
				lq.From, lq.Inclusive = r.Path, false
				if !c.Expired(r, now) {
					out = append(out, InfoOf(r))
				}
			}
			if len(rows) < want {
				break // the range is exhausted
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PrefixUpperBound returns the smallest string greater than every string starting with prefix, and
// false when there is none (the prefix is empty or all 0xff bytes).
func PrefixUpperBound(prefix string) (string, bool) {
	b := []byte(prefix)
	for len(b) > 0 && b[len(b)-1] == 0xff {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return "", false
	}
	b[len(b)-1]++
	return string(b), true
}

// AccessEntries returns how many streams the catalogue holds an in-memory access time for, and,
// when sweepAt > 0, sets the size at which NoteAccess sweeps (and its floor) to sweepAt. For the
// store's tests.
func (c *Catalog) AccessEntries(sweepAt int) int {
	p := c.access()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sweepAt > 0 {
		p.sweepAt, p.sweepMin = sweepAt, sweepAt
	}
	return len(p.access)
}
