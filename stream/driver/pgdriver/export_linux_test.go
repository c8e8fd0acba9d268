package pgdriver

import (
	"net"
	"syscall"
)

// BulkReadState reports, for a connection of the driver's pool (pgconn's net.Conn), whether it
// reads large messages in bulk (bulkReadConn), how often it raised its read threshold, and the
// socket's SO_RCVLOWAT now.
func BulkReadState(conn net.Conn) (raises, lowat int, ok bool, err error) {
	c, ok := conn.(*bulkReadConn)
	if !ok {
		return 0, 0, false, nil
	}
	raw, err := c.Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, 0, true, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		lowat, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil {
		return 0, 0, true, err
	}
	return c.raises, lowat, true, serr
}
