package stream

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
)

// ReadRequest asks for the records of a stream after a position (spec §10–§12).
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

// ReadRecords returns the data after req.After, renewing a sliding TTL (every GET does, spec §15).
func (s *Store) ReadRecords(ctx context.Context, req ReadRequest) (ReadResult, error) {
	if req.MaxBytes <= 0 {
		req.MaxBytes = DefaultReadMaxBytes
	}
	var res ReadResult
	if req.Watch {
		var id int64
		err := s.rdb.QueryRowContext(ctx, `SELECT id FROM streams WHERE path = ?`, req.Path).Scan(&id)
		if err == nil {
			res.Changed = s.changed(id)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return ReadResult{}, err
		}
	}
	now := s.clock.Now()
	var row *streamRow
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		r, err := s.loadLive(tx, req.Path, now)
		if err != nil {
			return err
		}
		row = r
		res.Info = infoOf(r)
		after := req.After
		if req.AtTail || after >= r.Tail {
			res.Next, res.UpToDate = r.Tail, true
			if res.Info.JSON {
				res.Body = []byte("[]")
			}
			return nil
		}
		if res.Info.JSON {
			return readJSON(tx, r, after, req.MaxBytes, &res)
		}
		return readBytes(tx, r, after, req.MaxBytes, &res)
	})
	if err != nil {
		return ReadResult{}, err
	}
	if req.Watch && res.Changed == nil {
		res.Changed = s.changed(row.ID)
	}
	s.noteAccess(row, now)
	return res, nil
}

func readJSON(q querier, r *streamRow, after int64, maxBytes int, res *ReadResult) error {
	rows, _, err := readEntries(q, r, after, maxReadMessages, maxBytes)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e.Body)
	}
	b.WriteByte(']')
	res.Body = b.Bytes()
	res.Count = len(rows)
	res.Next = after
	if len(rows) > 0 {
		res.Next = rows[len(rows)-1].Offset
	}
	if res.Next < after {
		res.Next = after
	}
	// Entries past the tail cannot exist; reaching the last one means reaching the tail.
	res.UpToDate = res.Next >= r.Tail
	if res.UpToDate {
		res.Next = r.Tail
	}
	return nil
}

func readBytes(q querier, r *streamRow, after int64, maxBytes int, res *ReadResult) error {
	rows, _, err := readEntries(q, r, after, 1024, maxBytes)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	next := after
	for _, e := range rows {
		body := e.Body
		start := e.RecordStart
		if start < next { // reading from inside a record
			body = body[min(int64(len(body)), next-start):]
			start = next
		}
		if room := maxBytes - b.Len(); len(body) > room {
			if room <= 0 {
				break
			}
			body = body[:room]
		}
		b.Write(body)
		next = start + int64(len(body))
		res.Count++
	}
	res.Body = b.Bytes()
	res.Next = next
	res.UpToDate = next >= r.Tail
	return nil
}
