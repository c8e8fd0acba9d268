package pgdriver

import (
	"net"
	"syscall"
)

// wrapBulkReads returns conn reading large messages in bulk (bulkReadConn) when it is a plain TCP
// connection, and conn itself otherwise.
func wrapBulkReads(conn net.Conn) net.Conn {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return conn
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return conn
	}
	return &bulkReadConn{Conn: conn, lowat: 1, setLowat: func(n int) error {
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
		}); err != nil {
			return err
		}
		return serr
	}}
}
