package pgdriver

import "github.com/foldstream/foldstream/internal/testhooks"

// init hands the driver's test-only counters to internal/testhooks, for the tests of the store and
// the host; this package's own tests read the fields directly (export_test.go).
func init() {
	testhooks.PGWriteRoundTrips = func(d any) int64 { return d.(*Driver).writeRoundTrips.Load() }
	testhooks.PGReads = func(d any) int64 { return d.(*Driver).reads.Load() }
	testhooks.PGListenMarkers = func(d any) uint64 { return d.(*Driver).listenMarkers() }
}
