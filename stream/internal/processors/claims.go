package processors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Claims and alarms (docs/store.md#claims-and-alarms).
//
// A claim is a durable row (path, slug, at) in the claims table: "revive processor slug of the
// stream at path by at". It is never a log event. The alarm loop keeps one timer on the store's
// clock for the earliest claim. When it fires, one write spends every due claim and the handler is
// called for each in its own goroutine.
//
// Spending a claim does not delete it: it moves it to its retry time, now + foldtype.ReviveAfter ·
// 2^failures (capped at foldtype.ReviveAfterMax, the engine's own backoff), and counts the attempt in failures. That row is the
// re-claim a failed revive needs, already durable before the revive starts, so a revive that fails,
// is cancelled by shutdown, or dies with its process is tried again. A revive that succeeds deletes
// the row — unless the processor claimed again meanwhile (a busy engine re-claims from revive),
// whose claim then stands. A claim made by the processor resets failures to 0.

// DueClaim is a claim the alarm loop spent and hands to the handler.
type DueClaim struct {
	// Path is the stream path and Slug the processor slug the claim was made for.
	Path, Slug string
	// At is when the claim fell due.
	At time.Time
	// Failures counts the revives of this claim that failed (or did not finish) before this one.
	Failures int

	retryAt int64 // at_ms of the retry row written when the claim was spent
}

// AlarmHandler revives the processor a due claim names. On an error (or a cancelled context) the
// claim's retry row, written with backoff when it was spent, stands; on success it is deleted.
type AlarmHandler func(ctx context.Context, c DueClaim) error

// ClaimRow is a stored claim.
type ClaimRow struct {
	// Path is the stream path and Slug the processor slug.
	Path, Slug string
	// At is when the claim falls due.
	At time.Time
	// Failures counts revives of this claim that failed or did not finish.
	Failures int
}

type alarmState struct {
	mu      sync.Mutex // serializes rearming
	handler AlarmHandler
	stop    func() bool
	armedAt int64 // at_ms the timer is set for; 0 when none
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // running alarm passes and handlers
}

// Claim records that processor slug on the stream at path must be revived by at; the zero time
// releases the claim. A new claim replaces the previous one of the same processor.
func (p *Records) Claim(ctx context.Context, path, slug string, at time.Time) error {
	err := p.k.Write(ctx, func(t *kernel.Tx) error {
		if at.IsZero() {
			return t.Driver().DeleteClaim(t.Context(), driver.Claim{Path: path, Slug: slug}, false)
		}
		return t.Driver().PutClaim(t.Context(), driver.Claim{Path: path, Slug: slug, AtMs: at.UnixMilli()})
	})
	if err != nil {
		return fmt.Errorf("claim %s for %q: %w", catalog.QuotePath(path), slug, err)
	}
	p.rearmAlarms()
	return nil
}

// Claims lists the stored claims, earliest first.
func (p *Records) Claims(ctx context.Context) ([]ClaimRow, error) {
	var out []ClaimRow
	err := p.k.Read(ctx, func(q driver.Reader) error {
		claims, err := q.Claims(ctx)
		for _, c := range claims {
			out = append(out, ClaimRow{Path: c.Path, Slug: c.Slug, At: time.UnixMilli(c.AtMs), Failures: c.Failures})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	return out, nil
}

// StartAlarms starts the alarm loop with handler; claims already due fire at once. Only one loop
// runs per store; the store's Close or StopAlarms stops it. Handlers get a context that ends when the
// loop stops.
func (p *Records) StartAlarms(handler AlarmHandler) error {
	if handler == nil {
		return errors.New("start alarms: handler is nil")
	}
	if p.k.Closed() {
		return kernel.ErrStoreClosed
	}
	a := &p.alarms
	a.mu.Lock()
	if a.handler != nil {
		a.mu.Unlock()
		return errors.New("start alarms: the alarm loop is already running")
	}
	a.handler = handler
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.Unlock()
	p.rearmAlarms()
	return nil
}

// StopAlarms stops the alarm loop: no new handler starts, handlers already running get their
// context cancelled, and StopAlarms waits for them to return.
func (p *Records) StopAlarms() {
	p.haltAlarms()
	p.alarms.wg.Wait()
}

// haltAlarms is StopAlarms without the wait: no handler starts after it, and the running ones have
// their context cancelled.
func (p *Records) haltAlarms() {
	a := &p.alarms
	a.mu.Lock()
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
	a.armedAt = 0
	if a.cancel != nil {
		a.cancel()
	}
	a.handler = nil
	a.mu.Unlock()
}

// rearmAlarms sets the timer for the earliest claim.
func (p *Records) rearmAlarms() {
	a := &p.alarms
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.handler == nil || p.k.Closed() {
		return
	}
	var next struct {
		Int64 int64
		Valid bool
	}
	err := p.k.Read(context.Background(), func(q driver.Reader) error {
		var err error
		next.Int64, next.Valid, err = q.NextClaimAt(context.Background())
		return err
	})
	if err != nil {
		if !errors.Is(err, kernel.ErrStoreClosed) {
			p.log.Error("stream store: arm alarm", "err", err)
		}
		return
	}
	if !next.Valid {
		if a.stop != nil {
			a.stop()
			a.stop = nil
		}
		a.armedAt = 0
		return
	}
	if a.stop != nil && a.armedAt == next.Int64 {
		return // already armed for this time
	}
	if a.stop != nil {
		a.stop()
	}
	a.armedAt = next.Int64
	d := time.UnixMilli(next.Int64).Sub(p.clock.Now())
	if d < 0 {
		d = 0
	}
	ctx := a.ctx
	a.stop = p.clock.AfterFunc(d, func() { p.fireAlarms(ctx) })
}

// fireAlarms spends every due claim (moving it to its retry time) and runs the handler for each.
func (p *Records) fireAlarms(ctx context.Context) {
	a := &p.alarms
	a.mu.Lock()
	handler := a.handler
	if handler == nil || ctx.Err() != nil || p.k.Closed() {
		a.mu.Unlock()
		return
	}
	a.stop = nil
	a.armedAt = 0
	a.wg.Add(1) // under a.mu with a live handler, so StopAlarms waits for this pass
	a.mu.Unlock()
	defer a.wg.Done()

	nowMs := p.clock.Now().UnixMilli()
	var due []DueClaim
	err := p.k.Write(ctx, func(t *kernel.Tx) error {
		due = due[:0]
		claims, err := t.Driver().DueClaims(t.Context(), nowMs)
		if err != nil {
			return err
		}
		for _, dc := range claims {
			c := DueClaim{Path: dc.Path, Slug: dc.Slug, At: time.UnixMilli(dc.AtMs), Failures: dc.Failures}
			c.retryAt = nowMs + retryDelay(c.Failures).Milliseconds()
			if err := t.Driver().PutClaim(t.Context(), driver.Claim{Path: c.Path, Slug: c.Slug, AtMs: c.retryAt, Failures: c.Failures + 1}); err != nil {
				return err
			}
			due = append(due, c)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, kernel.ErrStoreClosed) {
			p.log.Error("stream store: spend due claims", "err", err)
		}
		return
	}
	for _, c := range due {
		a.wg.Add(1) // the pass itself is still counted, so the counter is positive here
		go func() {
			defer a.wg.Done()
			p.runAlarm(ctx, handler, c)
		}()
	}
	p.rearmAlarms()
}

func (p *Records) runAlarm(ctx context.Context, handler AlarmHandler, c DueClaim) {
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("alarm handler panicked: %v", v)
			}
		}()
		return handler(ctx, c)
	}()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("stream store: revive failed; retrying with backoff", "path", c.Path, "slug", c.Slug,
				"failures", c.Failures+1, "retryAt", time.UnixMilli(c.retryAt), "err", err)
		}
		return // the retry row written when the claim was spent stands
	}
	werr := p.k.Write(context.WithoutCancel(ctx), func(t *kernel.Tx) error {
		// Only the retry row this pass wrote; a claim the processor made meanwhile stands.
		return t.Driver().DeleteClaim(t.Context(), driver.Claim{Path: c.Path, Slug: c.Slug, AtMs: c.retryAt, Failures: c.Failures + 1}, true)
	})
	if werr != nil {
		if !errors.Is(werr, kernel.ErrStoreClosed) {
			p.log.Error("stream store: settle a revived claim", "path", c.Path, "slug", c.Slug, "err", werr)
		}
		return
	}
	p.rearmAlarms()
}

// retryDelay is the backoff after failures failed revives: foldtype.ReviveAfter · 2^failures, capped.
func retryDelay(failures int) time.Duration {
	// Double until the cap: shifting the base by the failure count overflows int64 well before a
	// shift count a plain bound would catch (20 s << 29 already does).
	d := foldtype.ReviveAfter
	for i := 0; i < failures && d < foldtype.ReviveAfterMax; i++ {
		d *= 2
	}
	return min(d, foldtype.ReviveAfterMax)
}
