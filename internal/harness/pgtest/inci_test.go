package pgtest_test

import (
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// TestInCIAcceptsAnyNonEmptyCI: CI=1 (what .ci/run sets for go test) counts as CI, as it does for
// the other harnesses, so a PostgreSQL test fails instead of skipping there; only an empty CI
// does not.
func TestInCIAcceptsAnyNonEmptyCI(t *testing.T) {
	for _, v := range []string{"true", "TRUE", "1", "yes", "github"} {
		t.Setenv("CI", v)
		if !pgtest.InCI() {
			t.Errorf("CI=%q: InCI() = false, want true", v)
		}
	}
	t.Setenv("CI", "")
	if pgtest.InCI() {
		t.Error(`CI="": InCI() = true, want false`)
	}
}
