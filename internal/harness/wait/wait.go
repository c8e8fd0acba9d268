// Package wait lets a test wait for a condition that another goroutine or another process moves
// (a port opening, a row changing, a metric reaching a value) without sleeping for a guessed time:
// the condition is checked at once and then on every tick until it holds or the deadline passes.
//
// It is for conditions the test cannot be told about by a channel or a hook. Where the code offers
// one (a Changed channel, a fake clock's WaitArmed, testing/synctest), use that instead.
package wait

import "time"

// Interval is how often For re-checks its condition.
const Interval = 10 * time.Millisecond

// For reports whether cond held within timeout, checking it at once and then every Interval. The
// last check is made at the deadline, so a condition that holds by then counts.
func For(timeout time.Duration, cond func() bool) bool {
	return Every(timeout, Interval, cond)
}

// Every is For with its own re-check interval, for a condition whose check is costly (a request to
// another process) or that is retried as a client would.
func Every(timeout, interval time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}
