package feeds

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Publishing on a shared database (a driver that is not Exclusive; docs/postgres.md#live-reads).
//
// On SQLite the writer is the only source of commits, so it hands each commit's events to event
// waiters and subscribers itself, in commit order, and each push's range (after, through] chains
// on the previous one. On a shared database other nodes commit too: a local commit's range may
// start above offsets this node never published. Handing it over as is would tell a subscriber
// that (after, through] follows its last push contiguously when other nodes' events lie between —
// an engine fed by pushes would skip them. So on a shared database every stream path that has a
// waiter or a subscriber gets a feed: the last durable offset it published (its mark) and a lock
// that orders its publishing. Whenever the stream changed — a local commit, another node's
// notification, or the listener's "anything may have changed" — the feed reads the durable events
// after its mark from the database and publishes them in order; a notification that carries its
// records and starts at the mark is published from them instead, with no read. A local commit whose range starts
// at the mark is published at once from memory, as on SQLite, so an append that returned has its
// pushes queued (read-your-writes); one whose range starts above the mark first fills the gap from
// the database, on the writer goroutine.
//
// Ephemeral events are never in the database: a local commit's ephemerals are published with it,
// and other nodes' ephemerals arrive with their notifications and are published at once.

// useFeeds registers the feeds with the kernel: every notification of another process's commit
// reaches them (feedRemote).
func (h *Hub) useFeeds() { h.k.OnRemoteCommit(h.feedRemote) }

// feedRemote publishes what another process's commit n brought to the feed of its stream, or,
// when any stream may have changed (n.StreamID 0), has every feed catch up from the database.
func (h *Hub) feedRemote(n driver.Notification) {
	if n.StreamID == 0 {
		h.kickAllFeeds()
		return
	}
	h.remoteEphemerals(n)
	h.restartFeed(n.Path, n.StreamID)
	if !h.publishRemoteRecords(n) {
		h.kickFeed(n.Path)
	}
}

// feed is one path's publishing state on a shared database.
type feed struct {
	mu   sync.Mutex // held while publishing, so the feed's pushes are ordered
	path string
	mark int64 // the last durable offset published
	// id is the stream the mark counts in (0: none yet). A notification naming another stream at
	// the path — deleted and created again through another node — starts the mark over, so the
	// new stream's events reach the listeners, whose ranges then run backwards (docs/store.md#deleting-a-stream).
	id int64
	// kicks counts requests to catch up; the catch-up goroutine runs while it is non-zero.
	kickMu  sync.Mutex
	kicked  bool
	running bool
	// retryArmed: a catch-up read failed and another is due (retryFeedLater); retryFails counts
	// the failures in a row, which lengthen the pause. Guarded by kickMu.
	retryArmed bool
	retryFails int
}

type feedSet struct {
	mu     sync.Mutex
	byPath map[string]*feed
}

// ensureFeed returns the path's feed, creating it with its mark at the stream's current durable
// tail (nothing older is owed to a listener that registers now). Called when a subscriber or a
// waiter registers on a shared database.
func (h *Hub) ensureFeed(ctx context.Context, path string) (*feed, error) {
	fs := &h.feeds
	fs.mu.Lock()
	if f, ok := fs.byPath[path]; ok {
		fs.mu.Unlock()
		return f, nil
	}
	fs.mu.Unlock()
	tail, id, err := h.durableTail(ctx, path)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.byPath[path]; ok {
		return f, nil
	}
	if fs.byPath == nil {
		fs.byPath = make(map[string]*feed)
	}
	f := &feed{path: path, mark: tail, id: id}
	fs.byPath[path] = f
	return f, nil
}

// durableTail reads the stream's durable tail and id (0, 0 for a missing stream).
func (h *Hub) durableTail(ctx context.Context, path string) (tail, id int64, err error) {
	err = h.k.Read(ctx, func(q driver.Reader) error {
		row, err := q.StreamByPath(ctx, path)
		if err == driver.ErrNoStream {
			return nil
		}
		if err != nil {
			return err
		}
		tail, id = row.Tail, row.ID
		return nil
	})
	return tail, id, err
}

func (h *Hub) feedOf(path string) *feed {
	fs := &h.feeds
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.byPath[path]
}

// publishShared is publish on a shared database: called on the writer goroutine after a local
// commit of events over (after, through].
func (h *Hub) publishShared(path string, events []foldtype.Event, after, through int64) {
	f := h.feedOf(path)
	if f == nil {
		return // nobody listens on this node
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mark < after {
		h.fill(f, after)
	}
	if through > f.mark && f.mark >= after {
		h.publishLocal(path, events, f.mark, through)
		f.mark = through
		return
	}
	// Already published from the database (or the gap could not be filled: the next catch-up
	// will): only the ephemerals, which the database never holds.
	var eph []foldtype.Event
	for _, ev := range events {
		if ev.Ephemeral && ev.Offset > f.mark {
			eph = append(eph, ev)
		}
	}
	if len(eph) > 0 {
		h.publishLocal(path, eph, f.mark, f.mark)
	}
}

// fill publishes the durable events after f.mark from the database, until the mark reaches upTo
// (0: the tail). Called with f.mu held. A failed read leaves the mark where it got to and tries
// again after a pause (retryFeedLater), unless a notification or a commit catches up first.
func (h *Hub) fill(f *feed, upTo int64) {
	ctx, cancel := context.WithTimeout(context.Background(), feedReadTimeout)
	defer cancel()
	for {
		page, err := h.readDurable(ctx, f.path, f.mark)
		if err != nil {
			h.log.Warn("stream: catch up a shared stream's listeners", "path", f.path, "err", err)
			if foldtype.CodeOf(err) == foldtype.CodeUnavailable || errors.Is(err, context.DeadlineExceeded) {
				h.retryFeedLater(f) // the database out of reach: it will answer again
			}
			return
		}
		f.kickMu.Lock()
		f.retryFails = 0
		f.kickMu.Unlock()
		if page.ScannedThroughOffset <= f.mark {
			return
		}
		h.publishLocal(f.path, page.Events, f.mark, page.ScannedThroughOffset)
		f.mark = page.ScannedThroughOffset
		if page.AtHead || (upTo > 0 && f.mark >= upTo) {
			return
		}
	}
}

// restartFeed starts the path's feed over when a notification names another stream than the one
// it publishes: the stream was deleted and created again through another node.
func (h *Hub) restartFeed(path string, id int64) {
	f := h.feedOf(path)
	if f == nil || id == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.id == 0:
		f.id = id
	case f.id != id:
		f.id, f.mark = id, 0
	}
}

// kickFeed makes the path's feed catch up from the database in the background (another node
// committed). Kicks that arrive while it runs fold into one more pass.
func (h *Hub) kickFeed(path string) {
	f := h.feedOf(path)
	if f == nil {
		return
	}
	f.kickMu.Lock()
	f.kicked = true
	if f.running {
		f.kickMu.Unlock()
		return
	}
	// Counted under subsMu before closing is set, as a subscription's goroutine is, so Close's
	// wait for the background goroutines never races an Add (the listener that kicks feeds stops
	// only after that wait); a store that is closing starts none.
	h.subsMu.RLock()
	if h.closing {
		h.subsMu.RUnlock()
		f.kickMu.Unlock()
		return
	}
	h.k.Background().Add(1)
	h.subsMu.RUnlock()
	f.running = true
	f.kickMu.Unlock()
	go func() {
		defer h.k.Background().Done()
		for {
			f.kickMu.Lock()
			if !f.kicked || h.k.Closed() {
				f.running = false
				f.kickMu.Unlock()
				return
			}
			f.kicked = false
			f.kickMu.Unlock()
			f.mu.Lock()
			h.fill(f, 0)
			f.mu.Unlock()
		}
	}()
}

// The pause before a failed catch-up read is tried again: it starts at feedRetryFirst and doubles
// with each failure in a row up to feedRetryMax.
const (
	feedRetryFirst = 50 * time.Millisecond
	feedRetryMax   = 2 * time.Second
)

// retryFeedLater kicks f's catch-up again after a pause, once per failure: a catch-up read that
// failed because the database was out of reach (restarting, a pooled connection it had dropped)
// leaves the feed's listeners behind their stream, and when nobody commits to it again and no
// notification comes — a node nobody else writes to, the last appends before a quiet spell —
// nothing else would.
func (h *Hub) retryFeedLater(f *feed) {
	f.kickMu.Lock()
	defer f.kickMu.Unlock()
	if f.retryArmed {
		return
	}
	f.retryArmed = true
	pause := min(feedRetryFirst<<min(f.retryFails, 8), feedRetryMax)
	f.retryFails++
	h.clock.AfterFunc(pause, func() {
		f.kickMu.Lock()
		f.retryArmed = false
		f.kickMu.Unlock()
		h.kickFeed(f.path)
	})
}

// kickAllFeeds catches every feed up (the listener may have missed notifications).
func (h *Hub) kickAllFeeds() {
	fs := &h.feeds
	fs.mu.Lock()
	paths := make([]string, 0, len(fs.byPath))
	for p := range fs.byPath {
		paths = append(paths, p)
	}
	fs.mu.Unlock()
	for _, p := range paths {
		h.kickFeed(p)
	}
}

// remoteEphemerals hands another node's ephemeral events to this node's ring and subscribers (they are never in the database).
func (h *Hub) remoteEphemerals(n driver.Notification) {
	if len(n.Ephemeral) == 0 {
		return
	}
	var evs []foldtype.Event
	if err := json.Unmarshal(n.Ephemeral, &evs); err != nil || len(evs) == 0 {
		h.log.Warn("stream: unreadable ephemeral events from another node", "path", n.Path, "err", err)
		return
	}
	for i := range evs {
		evs[i].Ephemeral = true
		evs[i].Path = n.Path
	}
	h.RememberEphemerals(n.StreamID, evs)
	f := h.feedOf(n.Path)
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h.publishLocal(n.Path, evs, f.mark, f.mark)
}

// feedReadTimeout bounds one catch-up read of a feed.
const feedReadTimeout = 30 * time.Second

// publishRemoteRecords publishes another node's commit from the records its notification carried
// (docs/postgres.md#live-reads), with no read of the database. It reports false when the feed must
// read instead: the records did not travel, or they do not start at the feed's mark (a gap).
func (h *Hub) publishRemoteRecords(n driver.Notification) bool {
	f := h.feedOf(n.Path)
	if f == nil {
		return true // nobody listens on this node
	}
	row := n.Stream
	if row == nil || row.ID != n.StreamID || !kernel.IsJSONContentType(row.ContentType) || len(n.Records) == 0 || !kernel.Chains(n.Records[0].Start, n.Records, row.Tail) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.id != row.ID {
		return false
	}
	if f.mark >= row.Tail {
		return true // a catch-up read got there first
	}
	if f.mark != n.Records[0].Start {
		return false
	}
	evs := make([]foldtype.Event, 0, len(n.Records))
	for _, rec := range n.Records {
		var decErr error
		err := driver.EachFrame(rec, func(off int64, body []byte) bool {
			ev, err := catalog.DecodeEvent(n.Path, kernel.Message{Offset: off, RecordStart: rec.RecordStart, CreatedMs: rec.CreatedMs, Body: body})
			if err != nil {
				decErr = err
				return false
			}
			evs = append(evs, ev)
			return true
		})
		if err != nil || decErr != nil {
			return false // the catch-up read reports it
		}
	}
	h.publishLocal(n.Path, evs, f.mark, row.Tail)
	f.mark = row.Tail
	return true
}
