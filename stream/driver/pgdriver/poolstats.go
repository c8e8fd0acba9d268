package pgdriver

import "github.com/foldstream/foldstream/stream/driver"

var _ driver.PoolStatser = (*Driver)(nil)

// PoolStats returns the figures of the driver's connection pool now (the store's writer holds one
// of its connections for each group commit; reads, listings and leases take others).
func (d *Driver) PoolStats() driver.PoolStats {
	st := d.pool.Stat()
	return driver.PoolStats{
		Acquired: int(st.AcquiredConns()), Idle: int(st.IdleConns()), Total: int(st.TotalConns()), Max: int(st.MaxConns()),
		Acquires: st.AcquireCount(), Waits: st.EmptyAcquireCount(), WaitTime: st.EmptyAcquireWaitTime(),
	}
}
