package protocol

import (
	"context"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/sliced"
)

// Huge records are written in slices over several transactions (docs/store.md#huge-records,
// package sliced): the protocol face decides which appends take that path and judges the stream
// the record reserves; the record, its slices and its hold are package sliced's.

// slicedRecordBytes is the body size above which a protocol append is written in slices.
const slicedRecordBytes = sliced.Bytes

// planSliced returns the record of a huge append, or nil when the append is written in one
// transaction: small, on a driver without a visibility mark, a close, or JSON messages that need
// the idempotency check.
func (p *Protocol) planSliced(req AppendRequest, msgs []rawjson.Message, msgErr error) *sliced.Record {
	if !p.exclusive || len(req.Body) <= slicedRecordBytes || req.Close || req.HasExpectedTail || req.StreamSeq != "" {
		return nil
	}
	if !kernel.IsJSONContentType(req.ContentType) {
		return sliced.BytesRecord(req.Path, req.Body)
	}
	if msgErr != nil || len(msgs) == 0 {
		return nil
	}
	for i := range msgs {
		if _, key := eventKeyOf(&msgs[i]); key != "" {
			return nil
		}
	}
	return sliced.JSONRecord(req.Path, msgs)
}

// appendSliced writes a huge append in slices. ok is false when the append must take the usual
// path (nothing was written).
func (p *Protocol) appendSliced(ctx context.Context, req AppendRequest, msgs []rawjson.Message, msgErr error, r *sliced.Record) (res AppendResult, ok bool, err error) {
	json := kernel.IsJSONContentType(req.ContentType)
	reserve := func(t *kernel.Tx) (*kernel.StreamState, error) {
		m, err := p.c.LiveStream(t, req.Path)
		if err != nil {
			return nil, err
		}
		if m.Row.Closed || kernel.IsJSONContentType(m.Row.ContentType) != json {
			return nil, sliced.ErrNotSliced
		}
		if pr := req.Producer; pr != nil {
			// Only the plain next seq takes the sliced path: a duplicate, a gap or a new epoch are
			// answered by the usual path without writing the record.
			st, known, err := t.Producer(m, pr.ID)
			if err != nil || !known || pr.Epoch != st.Epoch || pr.Seq != st.LastSeq+1 {
				return nil, sliced.ErrNotSliced
			}
		}
		return m, nil
	}
	gone := func() error { return catalog.NotLive(catalog.Missing, req.Path) }
	ok, err = r.Write(ctx, p.k, reserve, gone, func(t *kernel.Tx) error {
		var gap int64
		var e error
		res, e = p.appendTx(t, req, msgs, msgErr, &gap)
		return e
	})
	if !ok || err != nil {
		return AppendResult{}, ok, err
	}
	return res, true, nil
}
