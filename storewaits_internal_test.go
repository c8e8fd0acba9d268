package foldstream

import (
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// An engine's status shows the write that has waited longest for the store (a background
// blocker's emit may wait beside the unit's checkpoint), a copy the caller cannot change, and
// nothing once every write ended; an engine that keeps no waits answers nil.
func TestTheStatusShowsTheWriteWaitingLongestForTheStore(t *testing.T) {
	t.Parallel()
	var none *storeWaits
	if w := none.begin(foldtype.ProcessorStoreWait{Write: "emit"}); w != nil || none.oldest() != nil {
		t.Fatal("an engine that keeps no waits noted one")
	}
	s := &storeWaits{}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := s.begin(foldtype.ProcessorStoreWait{Write: "checkpoint", Attempts: 1, Since: t0})
	emit := s.begin(foldtype.ProcessorStoreWait{Write: "emit", Attempts: 1, Since: t0.Add(time.Second)})
	s.update(cp, 3, &foldtype.Error{Code: foldtype.CodeUnavailable, Message: "down"})
	got := s.oldest()
	if got == nil || got.Write != "checkpoint" || got.Attempts != 3 || got.Code != foldtype.CodeUnavailable {
		t.Fatalf("oldest: %+v, want the checkpoint after 3 attempts, last refused with UNAVAILABLE", got)
	}
	got.Attempts = 99
	if s.oldest().Attempts != 3 {
		t.Fatal("the status's copy changed the wait itself")
	}
	s.end(cp)
	if got := s.oldest(); got == nil || got.Write != "emit" {
		t.Fatalf("after the checkpoint went through: %+v, want the emit", got)
	}
	s.end(emit)
	if got := s.oldest(); got != nil {
		t.Fatalf("after every write ended: %+v, want nil", got)
	}
}
