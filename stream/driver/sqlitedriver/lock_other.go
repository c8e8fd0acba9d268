//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlitedriver

import "os"

// tryLockFile is a no-op where flock(2) is unavailable: the store cannot refuse a second opener
// there (see docs/store.md).
func tryLockFile(f *os.File) (held bool, err error) { return false, nil }

// unlockFile is a no-op where flock(2) is unavailable.
func unlockFile(f *os.File) error { return nil }
