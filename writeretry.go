package foldstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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
	waits *storeWaits // the writes being sent again now, for the engine's status (nil: not kept)
}

// storeWaits are the writes of one engine being sent again now. Its status shows the oldest
// (foldtype.ProcessorStatus.WaitingForStore): an emit of a blocker running in the background may
// wait beside the unit's checkpoint.
type storeWaits struct {
	mu  sync.Mutex
	now []*foldtype.ProcessorStoreWait
}

// begin notes w as waiting and returns it, to give to update and end.
func (s *storeWaits) begin(w foldtype.ProcessorStoreWait) *foldtype.ProcessorStoreWait {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = append(s.now, &w)
	return &w
}

// update notes another failed attempt of w, with its error.
func (s *storeWaits) update(w *foldtype.ProcessorStoreWait, attempts int, err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Attempts, w.Code, w.Message = attempts, foldtype.CodeOf(err), err.Error()
}

// end forgets w: it went through, or the engine stopped sending it.
func (s *storeWaits) end(w *foldtype.ProcessorStoreWait) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.now {
		if x == w {
			s.now = append(s.now[:i], s.now[i+1:]...)
			return
		}
	}
}

// oldest returns a copy of the write waiting longest, or nil when none waits.
func (s *storeWaits) oldest() *foldtype.ProcessorStoreWait {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.now) == 0 {
		return nil
	}
	w := *s.now[0]
	return &w
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
	since := w.clock.Now()
	deadline := since.Add(w.limit)
	wait := w.waits.begin(foldtype.ProcessorStoreWait{Write: what, Code: foldtype.CodeOf(err), Message: err.Error(),
		Attempts: 1, Since: since, GivesUpAt: deadline})
	defer w.waits.end(wait)
	w.logger().Warn("engine: the store could not take a write; sending it again until it does",
		"slug", w.slug, "write", what, "code", foldtype.CodeOf(err), "error", err, "givesUpAfter", w.limit)
	pause := writeRetryFirst
	for attempt := 2; ; attempt++ {
		if !w.clock.Now().Add(pause).Before(deadline) {
			w.logger().Warn("engine: a write the store could not take is not sent again; its unit of work fails",
				"slug", w.slug, "write", what, "attempts", attempt-1, "waited", w.clock.Now().Sub(since), "error", err)
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
			w.logger().Info("engine: a write the store could not take went through when sent again",
				"slug", w.slug, "write", what, "attempts", attempt, "waited", w.clock.Now().Sub(since))
			return nil
		}
		if !resendable(err, idempotent) {
			return err
		}
		w.waits.update(wait, attempt, err)
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
