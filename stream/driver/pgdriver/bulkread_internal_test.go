package pgdriver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// framedStream returns backend messages with bodies of the given sizes, one after the other, and
// where each message ends.
func framedStream(sizes []int) (b []byte, ends []int) {
	for i, n := range sizes {
		hdr := [5]byte{'D'}
		binary.BigEndian.PutUint32(hdr[1:], uint32(n+4))
		b = append(b, hdr[:]...)
		b = append(b, bytes.Repeat([]byte{byte(i)}, n)...)
		ends = append(ends, len(b))
	}
	return b, ends
}

// trickleConn hands out its bytes in pieces of random size, as a socket does while the server
// is still sending, and checks before each read that the read threshold asks for no byte beyond
// the message being read.
type trickleConn struct {
	net.Conn
	t      *testing.T
	data   []byte
	ends   []int // where each message ends
	pos    int
	rng    *rand.Rand
	lowat  *int
	closed bool
}

func (c *trickleConn) Read(p []byte) (int, error) {
	if c.pos == len(c.data) {
		return 0, io.EOF
	}
	// The bytes surely on their way: the rest of the message pos is inside, none at a boundary.
	rest := 0
	if !c.atBoundary() {
		for _, end := range c.ends {
			if end > c.pos {
				rest = end - c.pos
				break
			}
		}
	}
	if *c.lowat > max(1, rest) {
		c.t.Fatalf("at byte %d the read waits for %d bytes, but only %d are surely coming", c.pos, *c.lowat, rest)
	}
	n := min(len(p), len(c.data)-c.pos, 1+c.rng.IntN(24<<10))
	copy(p, c.data[c.pos:c.pos+n])
	c.pos += n
	return n, nil
}

// atBoundary reports whether pos is where a message starts.
func (c *trickleConn) atBoundary() bool {
	if c.pos == 0 {
		return true
	}
	for _, end := range c.ends {
		if end == c.pos {
			return true
		}
	}
	return false
}

func (c *trickleConn) Close() error { c.closed = true; return nil }

func TestBulkReadsNeverWaitForBytesBeyondTheMessageBegun(t *testing.T) {
	t.Parallel()
	sizes := []int{0, 3, 100_000, 1, 16<<10 - 1, 16 << 10, 300_000, 6, 20_000, 1 << 20, 0, 2}
	for _, bufSize := range []int{8192, 1 << 20} {
		data, ends := framedStream(sizes)
		lowat := 1
		inner := &trickleConn{t: t, data: data, ends: ends, rng: rand.New(rand.NewPCG(1, uint64(bufSize))), lowat: &lowat}
		c := &bulkReadConn{Conn: inner, lowat: 1, setLowat: func(n int) error { lowat = n; return nil }}
		var got []byte
		buf := make([]byte, bufSize)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("reads of %d bytes: the bytes read differ from the bytes sent", bufSize)
		}
		if c.raises == 0 {
			t.Fatalf("reads of %d bytes: the threshold was never raised over messages of up to 1 MB", bufSize)
		}
		if lowat != 1 {
			t.Fatalf("reads of %d bytes: the threshold is %d after the last message, want 1", bufSize, lowat)
		}
	}
}

func TestBulkReadsFailTheConnectionWhenTheThresholdCannotBeLowered(t *testing.T) {
	t.Parallel()
	data, ends := framedStream([]int{100_000, 10})
	lowat := 1
	inner := &trickleConn{t: t, data: data, ends: ends, rng: rand.New(rand.NewPCG(2, 2)), lowat: &lowat}
	fail := false
	c := &bulkReadConn{Conn: inner, lowat: 1, setLowat: func(n int) error {
		if fail {
			return errors.New("setsockopt refused")
		}
		lowat = n
		return nil
	}}
	buf := make([]byte, 1<<20)
	for c.lowat == 1 {
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	fail = true
	for {
		_, err := c.Read(buf)
		if err != nil {
			if !inner.closed {
				t.Fatalf("read failed (%v) but left the connection open", err)
			}
			return
		}
		if inner.pos == len(inner.data) {
			t.Fatal("the reads went on past the message with a threshold that could not be lowered")
		}
	}
}
