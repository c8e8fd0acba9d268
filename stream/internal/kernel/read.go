package kernel

import (
	"context"
	"fmt"
	"strings"

	"github.com/foldstream/foldstream/stream/driver"
)

// streamRow is one stream row as the driver returns it.
type streamRow = driver.Stream

// errNoStream is returned by stream lookups when no row matches.
var errNoStream = driver.ErrNoStream

// LoadStreamByPath returns the stream row at path, or errNoStream. It does not judge expiry or
// soft deletion; callers do.
func LoadStreamByPath(ctx context.Context, q driver.Reader, path string) (*driver.Stream, error) {
	r, err := q.StreamByPath(ctx, path)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// LoadStreamByID returns the stream row with id, or errNoStream.
func LoadStreamByID(ctx context.Context, q driver.Reader, id int64) (*driver.Stream, error) {
	r, err := q.StreamByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Message is one stored message (JSON streams) or one record slice (byte streams) as a read
// sees it. Body is valid only during the callback that receives it.
type Message struct {
	Offset      int64  // the message's offset (JSON), or the slice's end position (bytes)
	Start       int64  // bytes: the slice's start position
	RecordStart int64  // where the message's record starts
	CreatedMs   int64  // when the message's record was written
	Body        []byte // the message's stored JSON, or the slice's bytes
}

// segment is a run of one stream's positions visible through a (possibly forked) stream:
// positions in (0, Through] of stream ID (Through < 0 means unbounded).
type segment struct {
	ID      int64
	Through int64
}

// segmentsOf returns the segments a read of stream r walks, oldest ancestor first: a fork sees its
// source's records up to its fork offset (recursively), then its own
// (docs/store.md#forks).
func segmentsOf(ctx context.Context, q driver.Reader, r *streamRow) ([]segment, error) {
	segs := []segment{{ID: r.ID, Through: -1}}
	if !r.ForkedFrom.Valid {
		return segs, nil
	}
	cur := r
	limit := int64(-1)
	for cur.ForkedFrom.Valid {
		through := cur.ForkOffset
		if limit >= 0 && limit < through {
			through = limit
		}
		parent, err := LoadStreamByID(ctx, q, cur.ForkedFrom.Int64)
		if err != nil {
			return nil, fmt.Errorf("load fork source of %s: %w", quotePath(cur.Path), err)
		}
		segs = append(segs, segment{ID: parent.ID, Through: through})
		limit = through
		cur = parent
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs, nil
}

// scanRecords calls fn for each stored record (or slice) visible through stream r with End >
// after, in position order, with the segment's upper bound (-1: none). fn returns false to stop.
func scanRecords(ctx context.Context, q driver.Reader, r *streamRow, after int64, fn func(rec driver.Record, upper int64) (bool, error)) error {
	_, err := ScanRecordsWithin(ctx, q, r, after, 0, fn)
	return err
}

// recordsWithin is q.Records for a page of budget bytes: when q reads pages
// (driver.SizedRecordsReader) it may stop before fn does, at a record the page does not take, and
// then reports stopped.
func recordsWithin(ctx context.Context, q driver.Reader, streamID, after int64, budget int, fn func(driver.Record) (bool, error)) (stopped bool, err error) {
	if sr, ok := q.(driver.SizedRecordsReader); ok && budget > 0 {
		return sr.RecordsWithin(ctx, streamID, after, budget, fn)
	}
	return false, q.Records(ctx, streamID, after, fn)
}

// ScanRecordsWithin is scanRecords for a page of budget bytes (0: no page): the driver may stop
// before fn does, at a record the page does not take (driver.SizedRecordsReader), which it
// reports as stopped; the records after it are then left for the next page.
func ScanRecordsWithin(ctx context.Context, q driver.Reader, r *driver.Stream, after int64, budget int, fn func(rec driver.Record, upper int64) (bool, error)) (stopped bool, err error) {
	segs, err := segmentsOf(ctx, q, r)
	if err != nil {
		return false, err
	}
	fnStopped := false
	for _, seg := range segs {
		if seg.Through >= 0 && seg.Through <= after {
			continue
		}
		past := false
		stopped, err := recordsWithin(ctx, q, seg.ID, after, budget, func(rec driver.Record) (bool, error) {
			if seg.Through >= 0 && rec.Start >= seg.Through {
				past = true
				return false, nil // past the fork point: the next segment continues
			}
			more, err := fn(rec, seg.Through)
			if err != nil {
				return false, err
			}
			if !more {
				fnStopped = true
			}
			return more, nil
		})
		if err != nil {
			return false, err
		}
		if fnStopped {
			return false, nil
		}
		if stopped && !past {
			return true, nil
		}
	}
	return false, nil
}

// ScanMessages calls fn for each message (JSON) or record slice (bytes) visible through stream r
// after position after, in order. fn returns false to stop.
func ScanMessages(ctx context.Context, q driver.Reader, r *driver.Stream, after int64, fn func(m Message) bool) error {
	_, err := ScanMessagesWithin(ctx, q, r, after, 0, fn)
	return err
}

// ScanMessagesWithin is ScanMessages for a page of budget bytes (see ScanRecordsWithin).
func ScanMessagesWithin(ctx context.Context, q driver.Reader, r *driver.Stream, after int64, budget int, fn func(m Message) bool) (stopped bool, err error) {
	isJSON := IsJSONContentType(r.ContentType)
	return ScanRecordsWithin(ctx, q, r, after, budget, func(rec driver.Record, upper int64) (bool, error) {
		if !isJSON {
			m := Message{Offset: rec.End, Start: rec.Start, RecordStart: rec.RecordStart, CreatedMs: rec.CreatedMs, Body: rec.Body}
			if upper >= 0 && m.Offset > upper {
				// Only a fork's split-record prefix ends inside a record, and it is its own record.
				m.Body = m.Body[:max(0, len(m.Body)-int(m.Offset-upper))]
				m.Offset = upper
			}
			return fn(m), nil
		}
		more := true
		err := driver.EachFrame(rec, func(off int64, body []byte) bool {
			if off <= after {
				return true
			}
			if upper >= 0 && off > upper {
				return false // past the fork point; the record after it ends the segment
			}
			more = fn(Message{Offset: off, RecordStart: rec.RecordStart, CreatedMs: rec.CreatedMs, Body: body})
			return more
		})
		if err != nil {
			return false, err
		}
		return more, nil
	})
}

// A stream's content type decides how its records are framed: JSON streams store messages,
// any other stores bytes.

// MediaType returns the lower-cased media type of a content type, parameters stripped.
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// IsJSONContentType reports whether a content type selects JSON mode.
func IsJSONContentType(contentType string) bool { return MediaType(contentType) == "application/json" }
