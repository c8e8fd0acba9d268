package foldstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessEventError is the error of a ProcessEvent call — or of the blocking work it started —
// that failed or panicked. The engine keeps its cursor before the event, so the next push, read or
// retry runs the event again.
type ProcessEventError struct {
	// Slug is the processor's slug.
	Slug string
	// Offset is the offset of the event being processed; 0 for the eventless pass.
	Offset int64
	// Err is what ProcessEvent returned (a panic's value as an error).
	Err error
	// Panicked reports a panic; Stack then holds the goroutine's stack at the panic.
	Panicked bool
	// Stack is the panic's stack, nil for a returned error.
	Stack []byte
}

// Error says what failed, where.
func (e *ProcessEventError) Error() string {
	what := "failed"
	if e.Panicked {
		what = "panicked"
	}
	if e.Offset == 0 {
		return fmt.Sprintf("processor %q: ProcessEvent %s on the eventless pass: %v", e.Slug, what, e.Err)
	}
	return fmt.Sprintf("processor %q: ProcessEvent %s at offset %d: %v", e.Slug, what, e.Offset, e.Err)
}

// Unwrap returns the cause.
func (e *ProcessEventError) Unwrap() error { return e.Err }

// Code returns the cause's catalogue code, or PROCESS_EVENT_FAILED for an uncoded error or a
// panic.
func (e *ProcessEventError) Code() Code {
	var fe *Error
	if !e.Panicked && errors.As(e.Err, &fe) && fe.Code != "" {
		return fe.Code
	}
	return foldtype.CodeProcessEventFailed
}

// guardedStack is callGuarded keeping a panic's stack.
func guardedStack(f func() error) (err error, panicked bool, stack []byte) {
	defer func() {
		if p := recover(); p != nil {
			err, panicked, stack = fmt.Errorf("panic: %v", p), true, debug.Stack()
		}
	}()
	return f(), false, nil
}

// skipState is an engine's skipped-event counts, by reason, and the distinct failures already
// logged in full.
type skipState struct {
	byReason map[string]*foldtype.SkippedEvents
	logged   map[string]bool
}

// noteSkip counts an event skipped at site and logs it in full the first time its failure (site
// and message) is seen; later ones go to the reporter only.
func (e *Engine[S]) noteSkip(site string, ev *Event, err error, stack []byte) {
	msg := err.Error()
	e.mu.Lock()
	if e.skips.byReason == nil {
		e.skips.byReason, e.skips.logged = map[string]*foldtype.SkippedEvents{}, map[string]bool{}
	}
	st := e.skips.byReason[site]
	if st == nil {
		st = &foldtype.SkippedEvents{Reason: site}
		e.skips.byReason[site] = st
	}
	st.Count++
	st.LastOffset, st.LastError = ev.Offset, msg
	key := site + "\x00" + msg
	first := !e.skips.logged[key] && len(e.skips.logged) < 64
	if first {
		e.skips.logged[key] = true
	}
	e.mu.Unlock()
	attrs := []slog.Attr{slog.String("slug", e.c.Slug()), slog.Int64("offset", ev.Offset)}
	if site == SiteReducePayload {
		attrs = append(attrs, slog.String("type", ev.Type))
	}
	if first {
		all := append([]slog.Attr{slog.String("site", site), slog.String("error", msg)}, attrs...)
		if stack != nil {
			all = append(all, slog.String("stack", string(stack)))
		}
		e.logger().LogAttrs(e.closing, slog.LevelWarn, "foldstream: processor "+e.c.Slug()+" skipped an event ("+site+"): "+msg, all...)
	}
	report(e.rep, site, err, attrs...)
	if e.metrics != nil {
		e.metrics.EventSkipped(site)
	}
}

// skipped returns the skipped-event counts, by reason. e.mu held.
func (e *Engine[S]) skippedLocked() []foldtype.SkippedEvents {
	if len(e.skips.byReason) == 0 {
		return nil
	}
	out := make([]foldtype.SkippedEvents, 0, len(e.skips.byReason))
	for _, site := range []string{SiteReducePayload, SiteReduce} {
		if st := e.skips.byReason[site]; st != nil {
			out = append(out, *st)
		}
	}
	return out
}

func (e *Engine[S]) logger() *slog.Logger {
	if e.log != nil {
		return e.log
	}
	return slog.Default()
}

// noteProcessFailure records a failure of ProcessEvent on ev (nil: the eventless pass) and returns
// err unchanged (the engine's verbs answer the processor's own error). An error that ends the
// engine's work (its context, a closed engine) is not a failure of the processor.
func (e *Engine[S]) noteProcessFailure(ev *Event, err error, panicked bool, stack []byte) error {
	if !panicked && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, foldtype.ErrClosed)) {
		return err
	}
	f := &ProcessEventError{Slug: e.c.Slug(), Err: err, Panicked: panicked, Stack: stack}
	if ev != nil {
		f.Offset = ev.Offset
	}
	e.mu.Lock()
	e.failure = f
	e.mu.Unlock()
	if e.metrics != nil {
		e.metrics.ProcessEventFailed(f.Code())
	}
	return err
}

// clearPassedFailureLocked drops the recorded failure once a commit got past it: a commit through
// the failing event's offset, or, for a failure of the eventless pass, a commit at head (which ran
// the pass again or delivered its last event caught up). A commit short of the failing event — the
// part of a gap repair below it, say — leaves it standing: the processor still fails there, and a
// host that follows ProcessFailure must not see it healed. e.mu held.
func (e *Engine[S]) clearPassedFailureLocked(newCursor int64, atHead bool) {
	f := e.failure
	if f == nil {
		return
	}
	if (f.Offset > 0 && newCursor >= f.Offset) || (f.Offset == 0 && atHead) {
		e.failure = nil
	}
}

// ProcessFailure returns the last failure of ProcessEvent (or of the blocking work it started)
// until a commit got past it, or nil: what a host reports about a failing processor (offset,
// cause, a panic's stack). Nil after a failure means the engine ran the failing event again and
// succeeded, on whatever path (a push, a read's catch-up, a retry).
func (e *Engine[S]) ProcessFailure() *ProcessEventError {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failure
}
