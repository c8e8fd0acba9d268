package stream

import "github.com/foldstream/foldstream/internal/testhooks"

// init hands the store's test-only counter to internal/testhooks, for the tests of other
// packages; this package's own tests read the fields directly.
func init() {
	testhooks.StoreCachedReads = func(s any) int64 { return s.(*Store).k.CachedReads() }
}
