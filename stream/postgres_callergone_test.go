package stream

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// TestOnPostgresAWriteWhoseCallerGoesAwayFailsNoWriteOfItsGroup: on a shared database too, a
// caller that goes away once its function started does not interrupt the function's statements.
// The statements of a group are queued on one connection, so one cancelled statement refused the
// whole group ("a queued statement failed, so the whole group is refused: context canceled"):
// every other caller whose write shared that commit was answered a failure it did not cause. On a
// busy cluster, clients that time out made the writes of clients that did not fail.
func TestOnPostgresAWriteWhoseCallerGoesAwayFailsNoWriteOfItsGroup(t *testing.T) {
	s := openPGStore(t, pgtest.URL(t))

	// One function: its caller goes away before its statement; the statement runs and commits.
	ctx, cancel := context.WithCancel(context.Background())
	var stmtErr error
	err := s.k.Write(ctx, func(tx *kernel.Tx) error {
		cancel()
		_, stmtErr = tx.Driver().InsertStream(tx.Context(), driver.Stream{Path: "/after-cancel", ContentType: EventContentType})
		return stmtErr
	})
	if stmtErr != nil || err != nil {
		t.Fatalf("write whose caller went away mid-function: statement %v, write %v; want both nil", stmtErr, err)
	}

	// Many functions at once, every other one's caller going away mid-function: they share
	// groups, and every one commits.
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs[i] = s.k.Write(ctx, func(tx *kernel.Tx) error {
				if i%2 == 0 {
					cancel()
				}
				_, err := tx.Driver().InsertStream(tx.Context(), driver.Stream{Path: fmt.Sprintf("/many/%02d", i), ContentType: EventContentType})
				return err
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d (caller gone: %v): %v", i, i%2 == 0, err)
		}
	}
	for i := range n {
		if _, err := s.Events().HeadStream(context.Background(), fmt.Sprintf("/many/%02d", i)); err != nil {
			t.Errorf("/many/%02d after the writes: %v; want it created", i, err)
		}
	}
}
