// Package protocol is the store's protocol face: the Durable Streams operations that package
// server maps to HTTP (docs/store.md#the-two-faces). It is a layer on the kernel (package
// kernel) and the catalogue of streams (package catalog), and calls down only: what the event
// face must hear of its writes (events to publish, streams created and deleted, the append-time
// check) goes through the hooks the event face registered with the catalogue. Package stream
// opens it with the store and offers it as stream.Protocol.
package protocol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
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
// the access time in memory (package catalog); the in-memory time counts for expiry at once and
// is persisted to streams.last_access_ms lazily, at most about once per second per stream, by a
// fire-and-forget write. POSTs persist it in their own transaction. After a crash a stream may
// therefore look up to about a second less recently read than it was.

// Protocol is the store's protocol face: the Durable Streams operations that package server maps
// to HTTP (docs/store.md#the-two-faces). Take it with stream.Store.Protocol; it is safe for
// concurrent use and valid until the store closes.
//
// It offers, over the same streams the event face serves:
//
//   - streams: [Protocol.CreateStream] (content type, TTL, forks), [Protocol.HeadStream],
//     [Protocol.ListStreams], [Protocol.DeleteStream] and [Protocol.CollectExpired];
//   - records: [Protocol.AppendRecord] (idempotent producers, Stream-Seq, closure, pausing by
//     control events) and [Protocol.ReadRecords], with [Protocol.ProducerArriving] to order
//     pipelined producer requests.
//
// The protocol's reserved subscription APIs are package subscriptions, over the store's
// subscription face (stream.Store.Subscriptions).
//
// A JSON stream's messages are the event face's events: a message the protocol appends is read by
// engines as an event, and an event appended by an engine is a message to a protocol reader.
type Protocol struct {
	k           *kernel.Store
	c           *catalog.Catalog
	clock       foldtype.Clock
	reorderWait time.Duration
	exclusive   bool                // the driver is the database's only writer
	caps        driver.Capabilities // what the driver offers beyond its interface
	arriving    arrivals            // producer requests in flight (inflight.go)

	// collectAfter is where CollectExpired resumes; only its write functions touch it, on the
	// writer goroutine.
	collectAfter int64
}

// Config is what the protocol face is opened with.
type Config struct {
	// Clock is the store's clock.
	Clock foldtype.Clock
	// ProducerReorderWait is stream.Config.ProducerReorderWait, its default applied.
	ProducerReorderWait time.Duration
}

// New opens the protocol face on kernel k and its catalogue c, while the store opens.
func New(k *kernel.Store, c *catalog.Catalog, cfg Config) *Protocol {
	d := k.Driver()
	return &Protocol{k: k, c: c, clock: cfg.Clock, reorderWait: cfg.ProducerReorderWait,
		exclusive: d.Exclusive(), caps: driver.CapabilitiesOf(d)}
}

// HeadStream returns a live stream's metadata; a stream that is missing, expired or deleted is
// refused with its code (STREAM_NOT_FOUND or STREAM_GONE). It never renews a TTL.
func (p *Protocol) HeadStream(ctx context.Context, path string) (StreamInfo, error) {
	return p.c.HeadStream(ctx, path)
}

// ListStreams returns the live streams whose path starts with opts.Prefix and sorts after
// opts.After, in path order (byte-wise), at most opts.Limit of them. Deleted and expired streams are
// left out. A page shorter than the limit is the last one; otherwise ask again with After set to
// the last path returned. Listing never renews a TTL.
func (p *Protocol) ListStreams(ctx context.Context, opts ListOptions) ([]StreamInfo, error) {
	return p.c.ListStreams(ctx, opts)
}

// hardDelete removes a stream, all its (dead) descendants, and then every soft-deleted or expired
// ancestor that no longer has references (docs/store.md#forks).
func (p *Protocol) hardDelete(t *kernel.Tx, r *driver.Stream) error {
	if err := p.deleteSubtree(t, r.ID, r.Path); err != nil {
		return err
	}
	parent := r.ForkedFrom
	for parent.Valid {
		pr, err := kernel.LoadStreamByID(t.Context(), t.Driver(), parent.Int64)
		if errors.Is(err, driver.ErrNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		if pr.State == 0 && !p.c.Expired(pr, t.Now()) {
			return nil
		}
		ref, err := p.c.HasReferences(t.Context(), t.Driver(), pr.ID, t.Now())
		if err != nil || ref {
			return err
		}
		if err := p.deleteSubtree(t, pr.ID, pr.Path); err != nil {
			return err
		}
		parent = pr.ForkedFrom
	}
	return nil
}

func (p *Protocol) deleteSubtree(t *kernel.Tx, id int64, path string) error {
	kids, err := t.Driver().ChildStreams(t.Context(), id)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := p.deleteSubtree(t, k.ID, k.Path); err != nil {
			return err
		}
	}
	if err := t.Driver().DeleteStream(t.Context(), id); err != nil {
		return fmt.Errorf("delete stream: %w", err)
	}
	if err := p.endIncarnation(t, id, path); err != nil {
		return err
	}
	t.Forget(path, id)
	// Every in-memory state keyed by the id goes with the stream: its incarnation wake mark and
	// the protocol view's access times.
	t.AfterCommit(func() {
		p.k.Unmark(id) // after-commit hooks run on the writer goroutine, which owns ws
		p.c.ForgetAccess(id)
	})
	return nil
}

// endIncarnation ends what belongs to one incarnation of the stream at path, in the deleting
// transaction: what the event face keeps of it (its processors' checkpoints and claims, its
// ephemeral ring, its subscriptions, which end with STREAM_DELETED) goes with it through the hook
// the event face registered (catalog.Hooks.Ended), so a stream created at the path again starts
// afresh. Every delete path — soft or hard, by DeleteStream, expiry collection or a create
// replacing an expired stream — calls it (docs/store.md#deleting-a-stream).
func (p *Protocol) endIncarnation(t *kernel.Tx, id int64, path string) error {
	return p.c.Ended(t, id, path)
}

// DeleteStream deletes a stream: soft while live forks read through it (the path stays reserved and
// answers "gone"), hard otherwise, collecting soft-deleted ancestors left without forks.
func (p *Protocol) DeleteStream(ctx context.Context, path string) error {
	return p.k.Write(ctx, func(t *kernel.Tx) error {
		m, err := p.c.LiveStream(t, path)
		if err != nil {
			return err
		}
		t.Changed(m.Row.ID, m.Row.Path)
		ref, err := p.c.HasReferences(t.Context(), t.Driver(), m.Row.ID, t.Now())
		if err != nil {
			return err
		}
		if ref {
			state := 1
			if err := t.Driver().UpdateStream(t.Context(), m.Row.ID, driver.StreamUpdate{State: &state}); err != nil {
				return err
			}
			m.Row.State = state
			return p.endIncarnation(t, m.Row.ID, m.Row.Path)
		}
		row := m.Row
		row.Tail = m.Tail
		return p.hardDelete(t, &row)
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
	deleted := 0
	err := p.k.Write(ctx, func(t *kernel.Tx) error {
		deleted = 0
		now := t.Now()
		// Resume after the last id examined, so candidates that must stay (sources with live forks)
		// never hide the ones behind them.
		cands, err := t.Driver().CollectCandidates(t.Context(), p.collectAfter, now.UnixMilli(), collectBatch)
		if err != nil {
			return fmt.Errorf("collect expired streams: %w", err)
		}
		next := int64(0) // wrapped around: the next sweep starts over
		if len(cands) >= collectBatch {
			next = cands[len(cands)-1].ID
		}
		t.AfterCommit(func() { p.collectAfter = next })
		for _, c := range cands {
			r, err := kernel.LoadStreamByID(t.Context(), t.Driver(), c.ID) // an earlier cascade may have taken it
			if errors.Is(err, driver.ErrNoStream) {
				continue
			}
			if err != nil {
				return err
			}
			lv, err := p.c.Judge(t.Context(), t.Driver(), r, now)
			if err != nil {
				return err
			}
			if lv != catalog.Missing {
				continue
			}
			before, err := t.Driver().CountStreams(t.Context())
			if err != nil {
				return err
			}
			if err := p.hardDelete(t, r); err != nil {
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
