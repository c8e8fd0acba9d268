package processors

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Parked events (docs/operations.md#skip): the events a processor was moved past without its
// ProcessEvent, each with the failure it met, stored where every node reads them. The rows of a
// stream go with its processor state when the stream is deleted.

// PutParkedEvent stores the parked event r, replacing the row of the same processor and offset.
// With fence set, only while that lease is held at its generation: else LEASE_LOST, nothing
// written.
func (p *Records) PutParkedEvent(ctx context.Context, r driver.ParkedEventRow, fence *driver.Fence) error {
	err := p.parkedWrite(ctx, func(ctx context.Context, pt driver.ParkedEventsTx) error {
		return pt.PutParkedEvent(ctx, r, fence)
	})
	if err != nil {
		return fmt.Errorf("park event %d of %q on %s: %w", r.Offset, r.Slug, catalog.QuotePath(r.Path), err)
	}
	return nil
}

// RemoveParkedEvent removes the parked event at offset of processor slug on path and reports
// whether there was one. fence as PutParkedEvent.
func (p *Records) RemoveParkedEvent(ctx context.Context, path, slug string, offset int64, fence *driver.Fence) (bool, error) {
	var removed bool
	err := p.parkedWrite(ctx, func(ctx context.Context, pt driver.ParkedEventsTx) error {
		var err error
		removed, err = pt.DeleteParkedEvent(ctx, path, slug, offset, fence)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("remove parked event %d of %q on %s: %w", offset, slug, catalog.QuotePath(path), err)
	}
	return removed, nil
}

// ParkedEvents returns the parked events q selects, by path, slug, then offset.
func (p *Records) ParkedEvents(ctx context.Context, q driver.ParkedEventQuery) ([]driver.ParkedEventRow, error) {
	var out []driver.ParkedEventRow
	err := p.k.Read(ctx, func(r driver.Reader) error {
		pr, ok := r.(driver.ParkedEventsReader)
		if !ok {
			return nil // nothing is stored
		}
		var err error
		out, err = pr.ParkedEvents(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read parked events: %w", err)
	}
	return out, nil
}

// ParkedEventCounts returns how many events are parked, by processor slug, over every stream.
func (p *Records) ParkedEventCounts(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := p.k.Read(ctx, func(r driver.Reader) error {
		pr, ok := r.(driver.ParkedEventsReader)
		if !ok {
			return nil // nothing is stored
		}
		var err error
		out, err = pr.ParkedEventCounts(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("count parked events: %w", err)
	}
	return out, nil
}

// parkedWrite runs fn in a write transaction on the driver's parked events table; a driver
// without it fails with errNoProcessorOps.
func (p *Records) parkedWrite(ctx context.Context, fn func(context.Context, driver.ParkedEventsTx) error) error {
	return p.k.Write(ctx, func(t *kernel.Tx) error {
		d, err := t.Begin()
		dctx := t.StatementContext(t.Context())
		if err != nil {
			return err
		}
		pt, ok := d.(driver.ParkedEventsTx)
		if !ok {
			return errNoProcessorOps
		}
		return fn(dctx, pt)
	})
}
