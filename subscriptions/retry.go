package subscriptions

import "time"

// Webhook retry backoff: 1 s doubling up to 60 s, each delay moved by up to ±20% at random.
const (
	RetryBase   = time.Second
	RetryMax    = 60 * time.Second
	RetryJitter = 0.2
)

// AttemptGuard is how long an attempt that was started may go without a result before the
// delivery loop tries it again (the node that started it may have died). It is longer than any
// attempt's HTTP timeout.
const AttemptGuard = 30 * time.Second

// RetryDelay is the wait before the retry that follows failed attempt number attempt
// (1-based): RetryBase doubled per earlier failure, capped at RetryMax, then moved by
// (2·u − 1)·RetryJitter of itself for u in [0, 1).
func RetryDelay(attempt int, u float64) time.Duration {
	d := RetryBase
	for i := 1; i < attempt && d < RetryMax; i++ {
		d *= 2
	}
	d = min(d, RetryMax)
	return time.Duration(float64(d) * (1 + (2*u-1)*RetryJitter))
}
