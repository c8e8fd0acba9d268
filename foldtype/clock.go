package foldtype

import "time"

// Clock is the source of wall-clock time and timers. Inject a fake (testsupport.FakeClock) so tests
// of claims, revision epochs and alarms are fast and exact.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d and returns a function that cancels the call,
	// reporting whether it stopped it before it ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

var _ Clock = SystemClock{}
