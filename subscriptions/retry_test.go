package subscriptions_test

import (
	"testing"
	"time"

	"github.com/foldstream/foldstream/subscriptions"
)

// TestWebhookRetryDelayDoublesToSixtySecondsWithTwentyPercentJitter checks the backoff table.
func TestWebhookRetryDelayDoublesToSixtySecondsWithTwentyPercentJitter(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		w *= time.Second
		for _, c := range []struct {
			u      float64
			factor float64
		}{{0, 0.8}, {0.5, 1}, {0.999999, 1.2}} {
			got := subscriptions.RetryDelay(i+1, c.u)
			exp := time.Duration(float64(w) * c.factor)
			if d := got - exp; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("attempt %d, u=%v: got %v, want %v", i+1, c.u, got, exp)
			}
		}
	}
}
