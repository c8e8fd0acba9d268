package processors

import "time"

// What the store's own tests (package stream's) drive the records through. They are functions,
// not methods, so that the event face offers the store's callers none of them.

// Rearm sets the alarm loop's timer for the earliest claim again, as a claim written does.
func Rearm(p *Records) { p.rearmAlarms() }

// RetryDelay is the backoff after failures failed revives.
func RetryDelay(failures int) time.Duration { return retryDelay(failures) }
