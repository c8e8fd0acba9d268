package processors

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Processor state rows and the operators' audit (docs/operations.md): the host's failure and
// pause state of each processor, stored where every node reads it, also when the node that ran
// the processor is dead. A running processor has no row. The rows of a stream go with its
// processor state when the stream is deleted.

// errNoProcessorOps is the answer of a driver without the processor state tables.
var errNoProcessorOps = foldtype.NewError(foldtype.CodeNoRoute, nil, "stream store: this database driver keeps no processor state")

// PutProcessorState stores the state row of (r.Path, r.Slug), replacing the one there. With fence
// set, only while that lease is held at its generation: else LEASE_LOST, nothing written.
func (p *Records) PutProcessorState(ctx context.Context, r driver.ProcessorStateRow, fence *driver.Fence) error {
	err := p.opsWrite(ctx, func(ctx context.Context, ot driver.ProcessorOpsTx) error {
		return ot.PutProcessorState(ctx, r, fence)
	})
	if err != nil {
		return fmt.Errorf("store the state of %q on %s: %w", r.Slug, catalog.QuotePath(r.Path), err)
	}
	return nil
}

// ClearProcessorState removes the state row of processor slug on path: it runs. fence as
// PutProcessorState.
func (p *Records) ClearProcessorState(ctx context.Context, path, slug string, fence *driver.Fence) error {
	err := p.opsWrite(ctx, func(ctx context.Context, ot driver.ProcessorOpsTx) error {
		return ot.DeleteProcessorStateRow(ctx, path, slug, fence)
	})
	if err != nil {
		return fmt.Errorf("clear the state of %q on %s: %w", slug, catalog.QuotePath(path), err)
	}
	return nil
}

// ProcessorStates returns the state rows q selects, by path then slug.
func (p *Records) ProcessorStates(ctx context.Context, q driver.ProcessorStateQuery) ([]driver.ProcessorStateRow, error) {
	var out []driver.ProcessorStateRow
	err := p.opsRead(ctx, func(or driver.ProcessorOpsReader) error {
		var err error
		out, err = or.ProcessorStates(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read processor states: %w", err)
	}
	return out, nil
}

// AppendAudit appends an operator's verb to the audit.
func (p *Records) AppendAudit(ctx context.Context, r driver.AuditRecord) error {
	err := p.opsWrite(ctx, func(ctx context.Context, ot driver.ProcessorOpsTx) error {
		return ot.InsertAuditRecord(ctx, r)
	})
	if err != nil {
		return fmt.Errorf("append to the audit: %w", err)
	}
	return nil
}

// Audit returns the audit records q selects, newest first.
func (p *Records) Audit(ctx context.Context, q driver.AuditQuery) ([]driver.AuditRecord, error) {
	var out []driver.AuditRecord
	err := p.opsRead(ctx, func(or driver.ProcessorOpsReader) error {
		var err error
		out, err = or.AuditRecords(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit: %w", err)
	}
	return out, nil
}

// opsWrite runs fn in a write transaction on the driver's processor state tables; a driver
// without them fails with errNoProcessorOps.
func (p *Records) opsWrite(ctx context.Context, fn func(context.Context, driver.ProcessorOpsTx) error) error {
	return p.k.Write(ctx, func(t *kernel.Tx) error {
		d, err := t.Begin()
		dctx := t.StatementContext(t.Context())
		if err != nil {
			return err
		}
		ot, ok := d.(driver.ProcessorOpsTx)
		if !ok {
			return errNoProcessorOps
		}
		return fn(dctx, ot)
	})
}

// opsRead runs fn in a read transaction on the driver's processor state tables; with a driver
// without them nothing is stored, and fn does not run.
func (p *Records) opsRead(ctx context.Context, fn func(driver.ProcessorOpsReader) error) error {
	return p.k.Read(ctx, func(r driver.Reader) error {
		or, ok := r.(driver.ProcessorOpsReader)
		if !ok {
			return nil
		}
		return fn(or)
	})
}
