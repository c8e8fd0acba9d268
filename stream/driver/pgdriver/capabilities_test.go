package pgdriver_test

import (
	"testing"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// TestThePostgresDriverOffersWhatASharedDatabaseNeeds: the store relies on these to stay correct
// on a shared database (a live read's listen barrier, the commit probe of a stalled writer, the
// takeover announcements), so losing one must fail a test, not silently degrade. (It codes its
// errors itself, so it needs no ErrorClassifier.)
func TestThePostgresDriverOffersWhatASharedDatabaseNeeds(t *testing.T) {
	c := driver.CapabilitiesOf(&pgdriver.Driver{})
	for name, ok := range map[string]bool{
		"LeaseWatcher": c.LeaseWatcher != nil, "LeaseBatchReleaser": c.LeaseBatchReleaser != nil,
		"Locator": c.Locator != nil, "PoolStats": c.PoolStats != nil,
		"ListenBarrier": c.ListenBarrier != nil, "CommitProber": c.CommitProber != nil,
	} {
		if !ok {
			t.Errorf("the PostgreSQL driver lacks %s", name)
		}
	}
}
