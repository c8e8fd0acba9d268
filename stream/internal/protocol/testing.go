package protocol

import (
	"context"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/sliced"
)

// What the store's own tests (package stream's) drive the protocol face through, one step of a
// request at a time. They are functions, not methods, so that stream.Protocol (an alias of
// Protocol) offers the store's callers none of them.

// SplitJSON is the protocol face's split of a JSON body into its messages, with the provenance
// rules prov (nil: none) applied; an empty array is refused unless allowEmpty.
func SplitJSON(body []byte, allowEmpty bool, prov *Provenance) ([]rawjson.Message, error) {
	return splitJSON(body, allowEmpty, prov)
}

// PlanSliced returns the huge record an append of req to p would write in slices, or nil when it
// takes the ordinary path.
func PlanSliced(p *Protocol, req AppendRequest, msgs []rawjson.Message, msgErr error) *sliced.Record {
	return p.planSliced(req, msgs, msgErr)
}

// AppendSliced writes the append of req as the huge record r in slices; ok is false when it
// went the ordinary way after all.
func AppendSliced(ctx context.Context, p *Protocol, req AppendRequest, msgs []rawjson.Message, msgErr error, r *sliced.Record) (res AppendResult, ok bool, err error) {
	return p.appendSliced(ctx, req, msgs, msgErr, r)
}

// ListenBarrier returns once p's driver's listener heard every commit made before the call, on
// drivers that can tell.
func ListenBarrier(ctx context.Context, p *Protocol) error { return p.listenBarrier(ctx) }
