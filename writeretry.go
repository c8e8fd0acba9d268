package foldstream

import (
	"context"
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

// again reports whether a write that failed with err may be sent again unchanged: the store
// refused it without writing it (UNAVAILABLE: the database could not be reached, or the write
// collided with another node's and was rolled back), or it may have been written
// (COMMIT_OUTCOME_UNKNOWN) and writing it once more cannot store it twice (idempotent: a
// checkpoint, which a second write leaves as the first did, or a batch every durable event of
// which has an idempotency key).
func (w writeRetry) again(err error, idempotent bool) bool {
	switch foldtype.CodeOf(err) {
	case foldtype.CodeUnavailable:
		return true
	case foldtype.CodeCommitOutcomeUnknown:
		return idempotent
	}
	return false
}

// do runs write and, while it fails with an error again accepts, runs it again after a pause on
// the engine's clock, for up to the limit since the first failure. Before each new attempt guard
// (nil: none) must let the work go on: its error ends the retries and is returned. The answer is
// the last attempt's error, or nil; when ctx ends meanwhile, the last attempt's error (the store's
// reason, not the engine's closing).
func (w writeRetry) do(ctx context.Context, what string, idempotent bool, guard func(context.Context) error, write func() error) error {
	err := write()
	if err == nil || w.limit <= 0 || !w.again(err, idempotent) {
		return err
	}
	deadline := w.clock.Now().Add(w.limit)
	pause := writeRetryFirst
	for attempt := 2; ; attempt++ {
		if !w.clock.Now().Add(pause).Before(deadline) {
			return err
		}
		if sleepOn(ctx, w.clock, pause) != nil {
			return err
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
		if !w.again(err, idempotent) {
			return err
		}
		pause = min(2*pause, writeRetryMax)
	}
}

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
