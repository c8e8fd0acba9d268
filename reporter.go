package foldstream

import (
	"context"
	"log/slog"
)

// Failure sites the engine reports contained failures under (docs/engine.md#errors-and-reporting).
const (
	SiteReduce        = "processor.reduce"         // attrs: slug, offset
	SiteReducePayload = "processor.reduce.payload" // attrs: slug, offset, type
	SiteLiveState     = "processor.live-state"     // attrs: slug
	SiteBackground    = "processor.background"     // attrs: slug
	SiteClaim         = "processor.claim"          // attrs: slug
	// SiteCheckpoint is a stale checkpoint whose state no longer decodes into the state type (a
	// foldstream addition; attrs: slug). The re-reduce replaces it.
	SiteCheckpoint = "processor.checkpoint"
	// SiteLiveStateAppend is a failed delta append (a foldstream addition; attrs: key).
	SiteLiveStateAppend = "live-state.append"
	// SiteLiveStateUndeclared is a member a LiveState.SetChanged check found changed without a
	// declaration; the delta of that call corrected it (a foldstream addition; attrs: key; the
	// error has code UNDECLARED_CHANGE and the paths in its data).
	SiteLiveStateUndeclared = "live-state.undeclared-change"
)

// Reporter receives contained failures: errors the engine swallows after handing them here. A
// reporter must not block for long; if it panics the panic is swallowed, so it can never fail its
// caller.
type Reporter interface {
	Report(ctx context.Context, site string, err error, attrs ...slog.Attr)
}

// ReporterFunc adapts a function to [Reporter].
type ReporterFunc func(ctx context.Context, site string, err error, attrs ...slog.Attr)

// Report calls f.
func (f ReporterFunc) Report(ctx context.Context, site string, err error, attrs ...slog.Attr) {
	f(ctx, site, err, attrs...)
}

// SlogReporter reports at Warn level on logger (slog.Default() when nil) with the site, the error
// and the attributes. It is the engine's default reporter.
func SlogReporter(logger *slog.Logger) Reporter {
	return ReporterFunc(func(ctx context.Context, site string, err error, attrs ...slog.Attr) {
		l := logger
		if l == nil {
			l = slog.Default()
		}
		all := make([]slog.Attr, 0, len(attrs)+2)
		all = append(all, slog.String("site", site), slog.Any("error", err))
		all = append(all, attrs...)
		l.LogAttrs(ctx, slog.LevelWarn, "foldstream: contained failure", all...)
	})
}

// report hands a failure to r and never lets r fail the caller.
func report(r Reporter, site string, err error, attrs ...slog.Attr) {
	if r == nil {
		return
	}
	defer func() { _ = recover() }()
	r.Report(context.Background(), site, err, attrs...)
}
