package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// RetryPolicy bounds the retries of idempotent requests (reads, HEAD, create) and of producer
// batches after 429, 5xx and network errors.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first. Defaults to 10; 1 disables
	// retries.
	MaxAttempts int
	// InitialDelay is the first backoff. Defaults to 100 ms.
	InitialDelay time.Duration
	// MaxDelay caps each backoff (and Retry-After). Defaults to 10 s.
	MaxDelay time.Duration
	// Multiplier grows the delay after each attempt. Defaults to 2.
	Multiplier float64
	// OnRetry, when set, is called before every backoff with what failed and how long the
	// client waits, so a program can show progress (the CLI prints one line per retry).
	OnRetry func(RetryEvent)
}

// RetryEvent describes one failed attempt that will be retried (RetryPolicy.OnRetry).
type RetryEvent struct {
	// Op names the operation ("append", "read", "producer send", ...).
	Op string
	// Attempt is the number of the attempt that failed, from 1; MaxAttempts is the policy's.
	Attempt, MaxAttempts int
	// Delay is the wait before the next attempt.
	Delay time.Duration
	// Status is the HTTP status that failed (429, 5xx), or 0 for Err.
	Status int
	// Err is the network error, when there was no response.
	Err error
}

// report calls OnRetry, if set.
func (r RetryPolicy) report(op string, attempt int, d time.Duration, status int, err error) {
	if r.OnRetry != nil {
		r.OnRetry(RetryEvent{Op: op, Attempt: attempt, MaxAttempts: r.MaxAttempts, Delay: d, Status: status, Err: err})
	}
}

// Retry defaults.
const (
	DefaultMaxAttempts  = 10
	DefaultInitialDelay = 100 * time.Millisecond
	DefaultMaxDelay     = 10 * time.Second
	DefaultMultiplier   = 2.0
)

func (r RetryPolicy) withDefaults() RetryPolicy {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.InitialDelay <= 0 {
		r.InitialDelay = DefaultInitialDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultMaxDelay
	}
	if r.Multiplier < 1 {
		r.Multiplier = DefaultMultiplier
	}
	return r
}

// delay returns the backoff before attempt number attempt+1 (attempt counts from 1), with
// "equal jitter" so that many clients do not retry in lockstep. A Retry-After from the server wins
// when it is longer, capped at MaxDelay.
func (r RetryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := float64(r.InitialDelay)
	for i := 1; i < attempt; i++ {
		d *= r.Multiplier
		if d >= float64(r.MaxDelay) {
			d = float64(r.MaxDelay)
			break
		}
	}
	half := time.Duration(d / 2)
	out := half + time.Duration(rand.Int64N(int64(half)+1))
	if retryAfter > out {
		out = retryAfter
	}
	if out > r.MaxDelay {
		out = r.MaxDelay
	}
	return out
}

// retryableStatus reports whether a status is worth retrying for an idempotent request.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header given in seconds or as an HTTP date.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Clock supplies time to the client and the producer. Inject a fake in tests to make linger
// timers and backoffs exact and instant.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d; the returned function cancels the call and
	// reports whether it stopped it before it ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// SystemClock is the real clock, the default.
var SystemClock Clock = systemClock{}

// sleep waits d on clock c or until ctx ends.
func sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	done := make(chan struct{})
	stop := c.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}

// isCtxErr reports whether err comes from a cancelled or expired context.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
