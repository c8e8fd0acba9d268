package client

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{InitialDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second, Multiplier: 2}.withDefaults()
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 10: 2 * time.Second} {
		for range 50 {
			got := p.delay(attempt, 0)
			if got < want/2 || got > want {
				t.Fatalf("attempt %d: delay %v outside the jitter window [%v, %v]", attempt, got, want/2, want)
			}
		}
	}
	if got := p.delay(1, 1500*time.Millisecond); got != 1500*time.Millisecond {
		t.Errorf("Retry-After 1.5s: got %v, want it honoured", got)
	}
	if got := p.delay(1, time.Hour); got != 2*time.Second {
		t.Errorf("Retry-After 1h: got %v, want it capped at MaxDelay", got)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "Thu, 01 Jan 2026 00:00:05 GMT": 5 * time.Second, "soon": 0, "-1": 0} {
		if got := parseRetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q: got %v, want %v", h, got, want)
		}
	}
}
