package protocol

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// ReadRequest asks for the records of a stream after a position (docs/store.md#reading).
type ReadRequest struct {
	// Path is the stream's path in the store.
	Path string
	// After is the position to read from (exclusive); ignored when AtTail.
	After int64
	// AtTail reads at the current tail (offset=now): no data, just the tail.
	AtTail bool
	// MaxBytes caps the bytes of one answer (at least one message, or a slice of a byte record,
	// is always returned). Defaults to 1 MiB.
	MaxBytes int
	// Watch asks for a channel closed at the next commit touching the stream, taken before the
	// read so no commit is missed.
	Watch bool
	// Fresh reads the database even when the tail cache holds the position (with Watch too): for
	// a claim that the answer is the tail, which on a shared database the cache can make a few
	// milliseconds late (it follows other nodes' commits by notification).
	Fresh bool
	// Buf, when not nil, is the memory the answer's Body is built in (from its start; it grows
	// when too small): a caller reading page after page passes the last page's Body[:0] and
	// allocates once. The Body of an earlier read that used the same memory is overwritten.
	Buf []byte
}

// ReadResult is one answer of ReadRecords.
type ReadResult struct {
	// Info is the stream's metadata as of the read.
	Info StreamInfo
	// Body is the data: raw bytes for byte streams, one JSON array for JSON streams.
	Body []byte
	// Count is the number of messages (JSON) or records (bytes) in Body.
	Count int
	// Next is the position after the returned data.
	Next int64
	// UpToDate reports that Next is the tail.
	UpToDate bool
	// Changed is closed at the next commit touching the stream (when Watch).
	Changed <-chan struct{}
}

// DefaultReadMaxBytes is the default cap of one read.
const DefaultReadMaxBytes = 1 << 20

// maxReadMessages caps the messages of one JSON read.
const maxReadMessages = 10000

// ReadRecords returns the data after req.After, renewing a sliding TTL (every GET does, docs/store.md#ttl-and-expiry).
func (p *Protocol) ReadRecords(ctx context.Context, req ReadRequest) (ReadResult, error) {
	if req.MaxBytes <= 0 {
		req.MaxBytes = DefaultReadMaxBytes
	}
	now := p.clock.Now()
	if req.Watch && !req.Fresh {
		// A live read: from the tail cache when it holds the position (the kernel's tailcache.go).
		if res, ok, err := p.cachedRead(req, now); ok || err != nil {
			if err != nil || !p.needsBarrier(req, res) {
				return res, err
			}
			// Data that claims the tail: on a shared database, first make sure every commit
			// before this read reached the cache (driver.ListenBarrier), then answer from it;
			// when that cannot be known, read the database.
			if p.listenBarrier(ctx) == nil {
				if res, ok, err := p.cachedRead(req, now); ok || err != nil {
					return res, err
				}
			}
		}
	}
	// With Watch, the change channel must be taken before the read, or a commit landing between
	// the read and taking the channel would go unnoticed until the next one. The channel is keyed
	// by stream id, which only the read itself proves: when the stream appeared (or was replaced)
	// between the id lookup and the read, take the right channel and read once more.
	watchID := int64(-1)
	var changed <-chan struct{}
	for attempt := 0; ; attempt++ {
		if req.Watch {
			var id int64
			err := p.k.Read(ctx, func(q driver.Reader) error {
				r, err := q.StreamByPath(ctx, req.Path)
				id = r.ID
				return err
			})
			if err == nil {
				watchID, changed = id, p.k.Changed(id)
			} else if !errors.Is(err, driver.ErrNoStream) {
				return ReadResult{}, err
			}
		}
		res, row, err := p.readRecordsOnce(ctx, req, now)
		if err != nil {
			return ReadResult{}, err
		}
		if req.Watch {
			if row.ID != watchID {
				if attempt == 0 {
					continue
				}
				// Replaced twice in a row: hand out the current stream's channel; at worst the
				// reader waits for its next commit or the poll timeout.
				changed = p.k.Changed(row.ID)
			} else {
				p.k.SeedTail(row, changed)
			}
			res.Changed = changed
		}
		p.c.NoteAccess(row, now)
		return res, nil
	}
}

func (p *Protocol) readRecordsOnce(ctx context.Context, req ReadRequest, now time.Time) (ReadResult, *driver.Stream, error) {
	var res ReadResult
	var row *driver.Stream
	err := p.k.Read(ctx, func(q driver.Reader) error {
		r, err := p.c.LoadLive(ctx, q, req.Path, now)
		if err != nil {
			return err
		}
		row = r
		res.Info = catalog.InfoOf(r)
		after := req.After
		if req.AtTail || after >= r.Tail {
			res.Next, res.UpToDate = r.Tail, true
			if res.Info.JSON {
				res.Body = []byte("[]")
			}
			return nil
		}
		if res.Info.JSON {
			return readJSON(ctx, q, r, after, req.MaxBytes, req.Buf, &res)
		}
		return readBytes(ctx, q, r, after, req.MaxBytes, req.Buf, &res)
	})
	if err != nil {
		return ReadResult{}, nil, err
	}
	return res, row, nil
}

// frameSummary returns the number of messages of a JSON record and the offset of its last one.
func frameSummary(rec driver.Record) (n int, last int64, err error) {
	last = rec.Start
	err = driver.EachFrame(rec, func(off int64, _ []byte) bool { n++; last = off; return true })
	return n, last, err
}

// readJSON answers a JSON read: the messages after position after, as one JSON array, up to
// maxBytes of message bytes (at least one message) and maxReadMessages messages. A stored record
// that fits whole is copied as it is stored (its messages already joined by commas); one that
// does not fit ends a page that is at least half full, and fills one that is not.
func readJSON(ctx context.Context, q driver.Reader, r *driver.Stream, after int64, maxBytes int, buf []byte, res *ReadResult) error {
	b := bytes.NewBuffer(buf[:0])
	if buf == nil {
		b.Grow(min(maxBytes, 64<<10) + 2)
	}
	b.WriteByte('[')
	count, total, cut := 0, 0, false
	next := after
	add := func(body []byte, n int) {
		if count > 0 {
			b.WriteByte(',')
		}
		b.Write(body)
		count += n
		total += len(body)
	}
	// The page takes at most maxBytes past its first record, which may be read from inside.
	stopped, err := kernel.ScanRecordsWithin(ctx, q, r, after, maxBytes, func(rec driver.Record, upper int64) (bool, error) {
		if rec.Start >= after && (upper < 0 || rec.End <= upper) && (count == 0 || total+len(rec.Body) <= maxBytes) {
			n, last, err := frameSummary(rec)
			if err != nil {
				return false, err
			}
			if n > 0 && count+n <= maxReadMessages && (total+len(rec.Body) <= maxBytes || n == 1) {
				add(rec.Body, n)
				next = last
				return count < maxReadMessages, nil
			}
		}
		if count > 0 && 2*total >= maxBytes && total+len(rec.Body) > maxBytes && rec.Start >= after && (upper < 0 || rec.End <= upper) {
			// The page is at least half full and the record does not fit whole: the page ends
			// here, and the next page reads the record whole, instead of this page reading it to
			// take a part and the next reading it again.
			cut = true
			return false, nil
		}
		more := true
		err := driver.EachFrame(rec, func(off int64, msg []byte) bool {
			if off <= after {
				return true
			}
			if upper >= 0 && off > upper {
				return false
			}
			if count > 0 && total+len(msg) > maxBytes {
				cut, more = true, false
				return false
			}
			add(msg, 1)
			next = off
			if count >= maxReadMessages {
				more = false
				return false
			}
			return true
		})
		return more, err
	})
	if err != nil {
		return err
	}
	if stopped {
		cut = true // the driver ended the page at a record it does not take
	}
	b.WriteByte(']')
	res.Body = b.Bytes()
	res.Count = count
	res.Next = max(next, after)
	// Reaching the last message means reaching the tail; so does a page that ran out of messages:
	// the tail may sit above the last message (an event batch ending with an ephemeral moves the
	// durable mark to the ephemeral's offset).
	res.UpToDate = res.Next >= r.Tail || (!cut && count < maxReadMessages)
	if res.UpToDate {
		res.Next = r.Tail
	}
	return nil
}

// readBytes answers a byte-stream read: the bytes after position after, up to maxBytes.
func readBytes(ctx context.Context, q driver.Reader, r *driver.Stream, after int64, maxBytes int, buf []byte, res *ReadResult) error {
	b := bytes.NewBuffer(buf[:0])
	next := after
	total := 0
	_, err := kernel.ScanMessagesWithin(ctx, q, r, after, maxBytes, func(m kernel.Message) bool {
		// A slice that does not fit whole is left for the next read, unless it is the first.
		if res.Count > 0 && total+len(m.Body) > maxBytes {
			return false
		}
		total += len(m.Body)
		body := m.Body
		start := m.Start
		if start < next { // reading from inside a record
			body = body[min(int64(len(body)), next-start):]
			start = next
		}
		room := maxBytes - b.Len()
		if room <= 0 {
			return false
		}
		if len(body) > room {
			body = body[:room]
		}
		b.Write(body)
		next = start + int64(len(body))
		res.Count++
		return true
	})
	if err != nil {
		return err
	}
	res.Body = b.Bytes()
	res.Next = next
	res.UpToDate = next >= r.Tail
	return nil
}

// cachedRead answers a live read from the tail cache (the kernel's tailcache.go): ok is false when the cache
// cannot (no entry, a position before the entry's records, a stream not live by its cached row).
func (p *Protocol) cachedRead(req ReadRequest, now time.Time) (res ReadResult, ok bool, err error) {
	row, recs, ch, ok := p.k.CachedTail(req.Path, req.After, req.AtTail, func(row *driver.Stream) bool { return !p.c.Expired(row, now) })
	if !ok {
		return res, false, nil
	}
	res.Info = catalog.InfoOf(&row)
	after := req.After
	switch {
	case req.AtTail || after >= row.Tail:
		res.Next, res.UpToDate = row.Tail, true
		if res.Info.JSON {
			res.Body = []byte("[]")
		}
	case res.Info.JSON:
		err = readJSON(context.Background(), kernel.MemRecords{Recs: recs}, &row, after, req.MaxBytes, req.Buf, &res)
	default:
		err = readBytes(context.Background(), kernel.MemRecords{Recs: recs}, &row, after, req.MaxBytes, req.Buf, &res)
	}
	if err != nil {
		return ReadResult{}, false, err
	}
	res.Changed = ch
	p.k.NoteCachedRead()
	p.c.NoteAccess(&row, now)
	return res, true, nil
}

// needsBarrier reports whether res, a live read's answer from the tail cache, must wait for the
// listen barrier before it goes out: on a shared database, an answer with data that claims to
// reach the tail (UpToDate). The cache hears other nodes' commits by notification, which may
// still be on its way, so without the barrier a client could stop at "up to date" short of an
// append another node acknowledged before the read began (docs/postgres.md#live-reads). An
// answer without data waits for a change first (and a long-poll that runs out confirms its tail
// with the database); a read from the tail starts wherever the tail is.
func (p *Protocol) needsBarrier(req ReadRequest, res ReadResult) bool {
	return !p.exclusive && res.UpToDate && !req.AtTail && (res.Count > 0 || res.Next > req.After)
}

// listenBarrier waits until every commit of another node before the call reached this node's
// listener (driver.ListenBarrier); it fails when the driver cannot tell.
func (p *Protocol) listenBarrier(ctx context.Context) error {
	if lb := p.caps.ListenBarrier; lb != nil {
		return lb.ListenBarrier(ctx)
	}
	return errNoBarrier
}

// errNoBarrier: the driver has no listen barrier.
var errNoBarrier = errors.New("stream store: the driver has no listen barrier")
