package sqlitedriver_test

import (
	"testing"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// TestTheSQLiteDriverStatesItsCapabilities: the SQLite driver, the only writer of its file, needs
// no listen barrier, commit probe or pool figures; it announces released leases (in memory) and
// codes its errors.
func TestTheSQLiteDriverStatesItsCapabilities(t *testing.T) {
	c := driver.CapabilitiesOf(&sqlitedriver.Driver{})
	if c.LeaseWatcher == nil || c.ErrorClassifier == nil || c.Locator == nil {
		t.Errorf("the SQLite driver lacks a capability it has: %+v", c)
	}
	if c.ListenBarrier != nil || c.PoolStats != nil {
		t.Errorf("the SQLite driver states a shared database's capability: %+v", c)
	}
}
