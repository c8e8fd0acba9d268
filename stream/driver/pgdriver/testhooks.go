package pgdriver

import "github.com/foldstream/foldstream/internal/testhooks"

// init hands the driver's test-only counters to internal/testhooks, for the tests of the store, the
// host and this package's external tests.
func init() {
	testhooks.PGWriteRoundTrips = func(d any) int64 { return d.(*Driver).writeRoundTrips.Load() }
	testhooks.PGReads = func(d any) int64 { return d.(*Driver).reads.Load() }
	testhooks.PGListenMarkers = func(d any) uint64 { return d.(*Driver).listenMarkers() }
}
