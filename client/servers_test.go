package client_test

import (
	"strings"
	"testing"

	"github.com/foldstream/foldstream/internal/refserver"
)

// eachServer runs f as a parallel subtest against every server the client is tested with.
func eachServer(t *testing.T, f func(t *testing.T, base string)) {
	t.Helper()
	t.Run("reference", func(t *testing.T) {
		t.Parallel()
		f(t, refserver.Start(t))
	})
}

// exactlyOnceMessages is the size of the exactly-once test: 100k, 10k with -short, and fewer for
// the in-process foldstream server under the race detector, whose instrumented SQLite is ~20x
// slower (the reference server runs in its own process and keeps the full 100k).
func exactlyOnceMessages(t *testing.T) int {
	switch {
	case raceEnabled && strings.HasSuffix(t.Name(), "/foldstream"):
		return 5_000
	case testing.Short():
		return 10_000
	}
	return 100_000
}
