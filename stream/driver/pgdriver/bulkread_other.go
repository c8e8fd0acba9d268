//go:build !linux

package pgdriver

import "net"

// wrapBulkReads returns conn: the bulk read wake-up (bulkReadConn) is built on Linux's
// SO_RCVLOWAT, which also governs when epoll reports a socket readable.
func wrapBulkReads(conn net.Conn) net.Conn { return conn }
