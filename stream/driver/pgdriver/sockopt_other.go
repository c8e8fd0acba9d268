//go:build !linux

package pgdriver

import (
	"syscall"
	"time"
)

// userTimeout is nil where TCP_USER_TIMEOUT does not exist: keepalives alone find dead
// connections.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
