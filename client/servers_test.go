package client_test

import (
	"testing"

	"github.com/foldstream/foldstream/internal/harness/refserver"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// eachServer runs f as a parallel subtest against foldstream's own server (in process) and the
// upstream reference server (a Node subprocess), so the client is proven against both.
func eachServer(t *testing.T, f func(t *testing.T, base string)) {
	t.Helper()
	t.Run("foldstream", func(t *testing.T) {
		t.Parallel()
		f(t, testserver.Start(t))
	})
	t.Run("reference", func(t *testing.T) {
		t.Parallel()
		f(t, refserver.Start(t))
	})
}

// exactlyOnceMessages is the size of the exactly-once test: 100k messages, 10k with -short.
func exactlyOnceMessages() int {
	if testing.Short() {
		return 10_000
	}
	return 100_000
}
