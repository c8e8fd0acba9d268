package foldstream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// An engine's own writes through a database blip (docs/engine.md#writes-through-a-database-blip):
// a checkpoint or an emitted batch the store refused because its database could not be reached
// is sent again, as it was, instead of failing the range and running its effects again.

// DefaultWriteRetry is how long, by default, an engine keeps sending again a write of its own that
// the store refused because its database could not be reached (EngineConfig.WriteRetry).
const DefaultWriteRetry = 30 * time.Second

// The pause between two attempts of one write: it starts at writeRetryFirst and doubles up to
// writeRetryMax, so a database back within a second is used at once and one down for long is
// asked about once a second.
const (
	writeRetryFirst = 50 * time.Millisecond
	writeRetryMax   = time.Second
)

// writeRetry sends an engine's writes again while the store's database is out of reach.
type writeRetry struct {
	clock Clock
	limit time.Duration // <= 0: no write is sent again
	log   *slog.Logger
	slug  string
}

// resendable reports whether a write that failed with err may be sent again unchanged: the store
// refused it without writing it (UNAVAILABLE: the database could not be reached, or the write
// collided with another node's and was rolled back), or it may have been written
// (COMMIT_OUTCOME_UNKNOWN) and writing it once more cannot store it twice (idempotent, asked only
// then: a checkpoint, which a second write leaves as the first did, or a batch every durable event
// of which has an idempotency key).
func resendable(err error, idempotent func() bool) bool {
	switch foldtype.CodeOf(err) {
	case foldtype.CodeUnavailable:
		return true
	case foldtype.CodeCommitOutcomeUnknown:
		return idempotent()
	}
	return false
}

// after is called with the error of a write's first attempt (the write itself is the caller's, so
// a write that goes through costs nothing here). While the error is resendable it runs write again
// after a pause on the engine's clock, for up to the limit since that failure. Before each new
// attempt guard (nil: none) must let the work go on: its error ends the retries and is returned.
// The answer is the last attempt's error, or nil; when ctx ends meanwhile, the last attempt's
// error wrapped with ctx's (the store's reason for a caller that reads it, and a cancellation for
// one that stops on it: an engine closing records no failure for the unit it cut short).
func (w writeRetry) after(ctx context.Context, err error, what string, idempotent func() bool, guard func(context.Context) error, write func() error) error {
	if err == nil || w.limit <= 0 || !resendable(err, idempotent) {
		return err
	}
	deadline := w.clock.Now().Add(w.limit)
	pause := writeRetryFirst
	for attempt := 2; ; attempt++ {
		if !w.clock.Now().Add(pause).Before(deadline) {
			return err
		}
		if cerr := sleepOn(ctx, w.clock, pause); cerr != nil {
			return fmt.Errorf("%w (not sent again: %w)", err, cerr)
		}
		if guard != nil {
			if gerr := guard(ctx); gerr != nil {
				return gerr
			}
		}
		err = write()
		if err == nil {
			w.logger().Debug("engine: a write the store could not make went through when sent again",
				"slug", w.slug, "write", what, "attempts", attempt)
			return nil
		}
		if !resendable(err, idempotent) {
			return err
		}
		pause = min(2*pause, writeRetryMax)
	}
}

// always is the idempotence of a write that a second copy leaves as the first did.
func always() bool { return true }

func (w writeRetry) logger() *slog.Logger {
	if w.log != nil {
		return w.log
	}
	return slog.Default()
}

// sleepOn waits d on clock, or until ctx ends (its error then).
func sleepOn(ctx context.Context, clock Clock, d time.Duration) error {
	done := make(chan struct{})
	stop := clock.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}
