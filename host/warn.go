package host

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// DefaultWarnInterval is how long the host folds repeats of one warning into a count; see
// Config.WarnInterval.
const DefaultWarnInterval = 10 * time.Second

// repeatFolder is a slog.Handler that passes every record below Warn through, and of the warnings
// (and errors) with one message passes the first of each interval through and counts the rest: at
// the interval's end it writes one line with that message and the attributes "repeated" (how many
// were folded) and "interval". A processor that fails the same way on every push, or a
// subscription that overflows on every commit, then costs one line per interval instead of
// thousands. The interval runs on the injected clock.
type repeatFolder struct {
	inner slog.Handler
	st    *foldState
}

type foldState struct {
	clock    foldtype.Clock
	interval time.Duration
	out      slog.Handler // the handler the summary lines go to

	mu     sync.Mutex
	counts map[foldKey]int // messages seen in the current interval, and their repeats
	order  []foldKey
	stop   func() bool // the interval's timer; nil when none runs
}

type foldKey struct {
	level slog.Level
	msg   string
}

func newRepeatFolder(inner slog.Handler, clock foldtype.Clock, interval time.Duration) *repeatFolder {
	return &repeatFolder{inner: inner, st: &foldState{clock: clock, interval: interval, out: inner, counts: map[foldKey]int{}}}
}

// Enabled reports whether the inner handler takes records of level.
func (f *repeatFolder) Enabled(ctx context.Context, level slog.Level) bool {
	return f.inner.Enabled(ctx, level)
}

// Handle passes r through, unless it repeats a warning already written in this interval.
func (f *repeatFolder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return f.inner.Handle(ctx, r)
	}
	st := f.st
	k := foldKey{r.Level, r.Message}
	st.mu.Lock()
	if n, seen := st.counts[k]; seen {
		st.counts[k] = n + 1
		st.mu.Unlock()
		return nil
	}
	st.counts[k] = 0
	st.order = append(st.order, k)
	if st.stop == nil {
		st.stop = st.clock.AfterFunc(st.interval, st.flush)
	}
	st.mu.Unlock()
	return f.inner.Handle(ctx, r)
}

// WithAttrs returns a folder over the inner handler with attrs, sharing this one's counts.
func (f *repeatFolder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &repeatFolder{inner: f.inner.WithAttrs(attrs), st: f.st}
}

// WithGroup returns a folder over the inner handler with the group, sharing this one's counts.
func (f *repeatFolder) WithGroup(name string) slog.Handler {
	return &repeatFolder{inner: f.inner.WithGroup(name), st: f.st}
}

// flush ends the interval: one summary line per message that repeated.
func (st *foldState) flush() {
	st.mu.Lock()
	counts, order := st.counts, st.order
	st.counts, st.order, st.stop = map[foldKey]int{}, nil, nil
	st.mu.Unlock()
	for _, k := range order {
		n := counts[k]
		if n == 0 {
			continue
		}
		r := slog.NewRecord(st.clock.Now(), k.level, k.msg, 0)
		r.AddAttrs(slog.Int("repeated", n), slog.Duration("interval", st.interval))
		_ = st.out.Handle(context.Background(), r)
	}
}

// close stops the interval's timer and writes what it counted so far.
func (st *foldState) close() {
	st.mu.Lock()
	if st.stop != nil {
		st.stop()
	}
	st.mu.Unlock()
	st.flush()
}
