package pgdriver

import (
	"encoding/binary"
	"fmt"
	"net"
)

// Bounds of the bulk read wake-up (bulkReadConn).
const (
	// bulkReadMin is the rest of a message from which a read waits for more than what has
	// arrived: smaller messages are read as they come.
	bulkReadMin = 16 << 10
	// bulkReadMax is the most a read waits for before it is woken.
	bulkReadMax = 256 << 10
)

// bulkReadConn wakes its reader once per large message, or per bulkReadMax bytes of one, instead
// of once per segment. PostgreSQL sends a row through a fixed 8 KiB buffer, so a catch-up's
// 100 KB record arrives as a dozen 8 KiB writes, and pgx, which reads whatever has arrived, was
// woken for each: a wake-up of the node per 8 KiB, and of the backend when the node drained its
// socket (docs/postgres.md#reads). The connection follows the protocol's message framing in the
// bytes it reads (a type byte, a four-byte length, the body) and, while a message has at least
// bulkReadMin bytes still to come, asks the kernel (SO_RCVLOWAT) not to report the socket
// readable before that rest, at most bulkReadMax, has arrived. Those bytes belong to a message
// the server has begun, so they come, or the connection fails, which wakes the reader too: a read
// never waits for bytes that are not on their way. At a message boundary the threshold is one
// byte again. Only a plain TCP connection is wrapped (wrapBulkReads): under TLS the socket's bytes
// are not the protocol's. Reads come one at a time (pgx's reader), as Read assumes.
type bulkReadConn struct {
	net.Conn
	// setLowat sets the socket's SO_RCVLOWAT.
	setLowat func(int) error
	lowat    int  // the socket's SO_RCVLOWAT now
	noRaise  bool // setting it failed once: keep reading as the connection does
	raises   int  // times the threshold was raised above one byte (tests)
	frame    frameTracker
}

// Read reads like the connection's Read, first setting the threshold for the message being read.
func (c *bulkReadConn) Read(p []byte) (int, error) {
	rest := c.frame.rest()
	want := 1
	if rest >= bulkReadMin && !c.noRaise {
		want = min(rest, bulkReadMax)
	}
	// The threshold must never exceed what is on its way; raising it is worth a system call when
	// it at least doubles.
	if c.lowat > max(1, rest) || want >= 2*c.lowat {
		if err := c.setLowat(want); err == nil {
			if want > 1 {
				c.raises++
			}
			c.lowat = want
		} else if c.lowat > max(1, rest) {
			// The threshold cannot be lowered: a read could wait for bytes that never come. Fail
			// the connection instead; the pool replaces it.
			c.Conn.Close()
			return 0, fmt.Errorf("postgres: lower the socket's read threshold: %w", err)
		} else {
			c.noRaise = true
		}
	}
	n, err := c.Conn.Read(p)
	c.frame.feed(p[:n])
	return n, err
}

// frameTracker follows the framing of PostgreSQL backend messages (a type byte, a four-byte
// big-endian length counting itself, the body) through a connection's bytes, in order.
type frameTracker struct {
	hdr  [5]byte
	nhdr int // header bytes seen of the next message
	left int // body bytes of the current message still to come
}

// feed accounts for bytes read from the connection.
func (f *frameTracker) feed(b []byte) {
	for len(b) > 0 {
		if f.left > 0 {
			k := min(f.left, len(b))
			f.left -= k
			b = b[k:]
			continue
		}
		k := copy(f.hdr[f.nhdr:], b)
		f.nhdr += k
		b = b[k:]
		if f.nhdr == len(f.hdr) {
			f.left = max(0, int(binary.BigEndian.Uint32(f.hdr[1:]))-4)
			f.nhdr = 0
		}
	}
}

// rest returns how many bytes of the message begun are still to come: 0 at a boundary.
func (f *frameTracker) rest() int {
	if f.left > 0 {
		return f.left
	}
	if f.nhdr > 0 {
		return len(f.hdr) - f.nhdr
	}
	return 0
}
